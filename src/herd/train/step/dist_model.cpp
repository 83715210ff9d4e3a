// Adapter from parallel::DistributedLlama to RankModel, including the checkpoint pieces of its shards.
//
// A full weight (R, C) lives in one FSDP unit's TP-local flat buffer at [local_offset, local_offset +
// local_count): TP rank t's block of it, model::tp_block (model/weights.h: all of a replicated norm,
// a band of rows or of columns), stored row-major either way. This DP rank owns the
// unit elements [shard_begin, shard_begin + S), so its piece of the weight is the intersection, with
// e0/e1 measured from the start of the TP block. Replicated norms are saved by TP rank 0 only (each
// element stored once) and loaded by every TP rank.
#include "herd/train/step/dist_model.h"

#include <algorithm>

#include "herd/parallel/model.h"
#include "herd/train/step/pipeline_model.h"

namespace herd::train {

template <typename T>
void append_stage_pieces(parallel::DistributedStage<T>& stage, const parallel::ParallelContext& ctx, bool for_load,
                         std::vector<ShardPiece<T>>& out) {
  const std::int64_t tp = ctx.tp_size(), t = ctx.tp_rank();
  for (const parallel::ShardedParam& p : stage.params()) {
    const model::Weight& w = p.w;
    if (!for_load && w.split == model::TpSplit::kReplicated && t != 0) continue;
    parallel::fsdp::FlatUnit<T>& unit = stage.unit(p.unit);
    const std::int64_t s0 = unit.shard_begin(), s1 = std::min(s0 + unit.shard_size(), unit.count());
    const std::int64_t a = std::max(s0, w.local_offset), b = std::min(s1, w.local_offset + w.local_count());
    if (a >= b) continue;
    ShardPiece<T> s;
    s.name = w.name;
    s.rows = w.rows;
    s.cols = w.cols;
    const model::TpBlock block = model::tp_block(w, tp, t);
    s.r0 = block.r0, s.r1 = block.r1, s.c0 = block.c0, s.c1 = block.c1;
    s.e0 = a - w.local_offset;
    s.e1 = b - w.local_offset;
    s.param = unit.shard_params() + (a - s0);
    s.m = stage.adam_m(p.unit) + (a - s0);
    s.v = stage.adam_v(p.unit) + (a - s0);
    s.g = unit.shard_grads() + (a - s0);
    out.push_back(s);
  }
}

template void append_stage_pieces<float>(parallel::DistributedStage<float>&, const parallel::ParallelContext&, bool,
                                         std::vector<ShardPiece<float>>&);
template void append_stage_pieces<double>(parallel::DistributedStage<double>&, const parallel::ParallelContext&, bool,
                                          std::vector<ShardPiece<double>>&);

namespace {

template <typename T>
class DistributedLlamaModel final : public RankModel<T> {
 public:
  DistributedLlamaModel(const parallel::ParallelContext& ctx, const model::LlamaConfig& m, model::Recompute r,
                        std::int64_t micro_batch, std::int64_t seq_len)
      : ctx_(ctx), model_(m, ctx, r, micro_batch, seq_len) {}

  void init_weights(std::uint64_t seed) override { model_.init_weights(seed); }
  void zero_grads() override { model_.zero_grads(); }
  Result<kernels::CrossEntropyLoss> forward_backward(const nn::MicroBatch& mb, T loss_scale,
                                                     bool last_micro_batch) override {
    return model_.forward_backward(mb, loss_scale, last_micro_batch);
  }
  // Forward only: a third of the training step's work.
  Result<kernels::CrossEntropyLoss> evaluate_step(const std::vector<nn::MicroBatch>& mbs) override {
    kernels::CrossEntropyLoss total;
    for (const nn::MicroBatch& mb : mbs) {
      HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss r, model_.evaluate(mb));
      total.loss_sum += r.loss_sum;
      total.count += r.count;
    }
    return total;
  }
  Result<double> grad_norm() override { return model_.grad_norm(); }
  Status apply_update(const kernels::AdamWConfig& cfg, double lr, double max_norm, double norm) override {
    model_.apply(cfg, lr, max_norm, norm);
    return Status::Ok();
  }
  std::int64_t optimizer_steps() const override { return model_.steps(); }
  void set_optimizer_steps(std::int64_t s) override { model_.set_steps(s); }

  // Each flat unit holds its gathered weights and full gradient buffer (padded) through the step (not
  // in a group of one, which uses its shards in place), and its shard's master weights, reduced
  // gradients and both AdamW moments.
  RankMemoryUse memory_use() override {
    double bytes = 0;
    for (std::int64_t u = 0; u < model_.unit_count(); ++u) {
      const parallel::fsdp::FlatUnit<T>& unit = model_.unit(u);
      bytes += unit.step_peak_bytes();
    }
    return {bytes, static_cast<double>(model_.arena().peak())};
  }
  std::vector<ShardPiece<T>> shard_pieces() override { return pieces(/*for_load=*/false); }
  std::vector<ShardPiece<T>> load_pieces() override { return pieces(/*for_load=*/true); }
  // The master shards were overwritten: bf16 weight copies are refreshed at the next gather.
  Status after_load() override {
    model_.stage().params_updated();
    return Status::Ok();
  }

  Result<std::vector<std::pair<std::string, std::vector<T>>>> gather_full_weights() override {
    HERD_ASSIGN_OR_RETURN(std::vector<T> full, model_.gather_full_weights());
    std::vector<std::pair<std::string, std::vector<T>>> out;
    for (const parallel::ShardedParam& p : model_.params()) {
      const T* b = full.data() + p.w.offset;
      out.emplace_back(p.w.name, std::vector<T>(b, b + p.w.count()));
    }
    return out;
  }

 private:
  std::vector<ShardPiece<T>> pieces(bool for_load) {
    std::vector<ShardPiece<T>> out;
    append_stage_pieces<T>(model_.stage(), ctx_, for_load, out);
    return out;
  }

  parallel::ParallelContext ctx_;
  parallel::DistributedLlama<T> model_;
};

}  // namespace

template <typename T>
RankModelFactory<T> distributed_llama_factory() {
  return [](const parallel::ParallelContext& ctx, const model::LlamaConfig& m,
            const TrainConfig& cfg) -> Result<std::unique_ptr<RankModel<T>>> {
    if (ctx.pp_size() > 1) return make_pipeline_llama<T>(ctx, m, cfg);
    HERD_ASSIGN_OR_RETURN(ResolvedLayout r, resolve_layout(cfg));
    return std::unique_ptr<RankModel<T>>(
        new DistributedLlamaModel<T>(ctx, m, r.layout.recompute, r.layout.microbatch, cfg.data.seq_len));
  };
}

template RankModelFactory<float> distributed_llama_factory<float>();
template RankModelFactory<double> distributed_llama_factory<double>();

}  // namespace herd::train
