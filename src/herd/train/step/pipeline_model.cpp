// PipelineLlamaModel: the pipeline executor over distributed stages as a RankModel (pipeline_model.h).
#include "herd/train/step/pipeline_model.h"

#include <algorithm>
#include <cmath>

#include "herd/model/weights.h"
#include "herd/parallel/pp/executor.h"
#include "herd/train/step/dist_model.h"

namespace herd::train {

Result<schedule::ScheduleSpec> pipeline_spec(const TrainConfig& cfg) {
  HERD_ASSIGN_OR_RETURN(ResolvedLayout r, resolve_layout(cfg));
  schedule::ScheduleSpec s;
  s.pp = static_cast<int>(r.layout.pp);
  s.v = r.layout.v;
  s.microbatches = static_cast<int>(r.microbatches);
  s.n = r.layout.n;
  s.kind = r.layout.schedule;
  return s;
}

Status check_pipeline(const TrainConfig& cfg, const model::LlamaConfig& m) {
  if (cfg.parallel.pp == 1) {
    if (cfg.parallel.v != 1) return make_error("parallel.v (", cfg.parallel.v, ") needs parallel.pp > 1; set v = 1");
    return Status::Ok();
  }
  HERD_ASSIGN_OR_RETURN(schedule::ScheduleSpec spec, pipeline_spec(cfg));
  Result<parallel::pp::PipelinePlan> plan = parallel::pp::plan_pipeline(m, spec);
  if (!plan.ok()) {
    return plan.error().with_context("pipeline pp=" + std::to_string(spec.pp) + " v=" + std::to_string(spec.v) +
                                     " M=" + std::to_string(spec.microbatches) + " n=" + std::to_string(spec.n));
  }
  return Status::Ok();
}

namespace {

template <typename T>
class PipelineLlamaModel final : public RankModel<T> {
 public:
  using Stage = parallel::DistributedStage<T>;
  using Executor = parallel::pp::PipelineExecutor<T>;

  PipelineLlamaModel(const parallel::ParallelContext& ctx, const model::LlamaConfig& m, model::Recompute r)
      : ctx_(ctx), cfg_(m), recompute_(r), table_(model::llama_weights(m, 1)) {
    for (const model::Weight& w : table_) full_count_ = std::max(full_count_, w.offset + w.count());
  }

  Status build(const schedule::ScheduleSpec& spec, std::int64_t micro_batch, std::int64_t seq_len) {
    parallel::pp::ExecutorOptions opt;
    opt.micro_batch = micro_batch;
    opt.seq_len = seq_len / ctx_.cp_size();
    opt.recompute = recompute_;
    boundary_bytes_ = static_cast<std::int64_t>(micro_batch * opt.seq_len * cfg_.hidden * sizeof(T));
    // The executor builds its chunks as DistributedStages over ctx (TP and CP hooks, one RoPE table).
    HERD_ASSIGN_OR_RETURN(ex_, Executor::make(ctx_, cfg_, spec, opt));
    return Status::Ok();
  }

  void init_weights(std::uint64_t seed) override {
    for (Stage& c : ex_->chunks()) c.init_weights(seed);  // each chunk its own shards
  }
  void zero_grads() override { ex_->zero_grads(); }
  Result<kernels::CrossEntropyLoss> forward_backward(const nn::MicroBatch&, T, bool) override {
    return make_error("a pipeline runs the micro-batches of a step together (forward_backward_step)");
  }
  Result<kernels::CrossEntropyLoss> forward_backward_step(const std::vector<nn::MicroBatch>& mbs,
                                                          T loss_scale) override {
    HERD_ASSIGN_OR_RETURN(parallel::pp::StepStats st, ex_->step(mbs, loss_scale));
    peak_activation_bytes_ = std::max(peak_activation_bytes_, st.peak_activation_bytes);
    peak_working_bytes_ = std::max(peak_working_bytes_, st.peak_working_bytes);
    peak_boundary_bytes_ = std::max(peak_boundary_bytes_, st.peak_boundary_buffers * boundary_bytes_);
    return kernels::CrossEntropyLoss{st.loss_sum, st.tokens};
  }
  Result<double> grad_norm() override {
    double sq = 0;
    for (const Stage& c : ex_->chunks()) sq += c.counted_sum_squares();
    HERD_RETURN_IF_ERROR(ctx_.tp->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));
    HERD_RETURN_IF_ERROR(ctx_.fsdp()->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));
    HERD_RETURN_IF_ERROR(ctx_.pp->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));  // different units
    return std::sqrt(sq);
  }
  Status apply_update(const kernels::AdamWConfig& base, double lr, double max_norm, double norm) override {
    kernels::AdamWConfig cfg = base;
    cfg.lr = lr;
    ++steps_;
    const double clip = max_norm > 0 ? kernels::clip_coefficient(norm, max_norm) : 1.0;
    for (Stage& c : ex_->chunks()) c.adamw(cfg, clip, steps_);
    return Status::Ok();
  }
  std::int64_t optimizer_steps() const override { return steps_; }
  void set_optimizer_steps(std::int64_t s) override { steps_ = s; }

  // As DistributedLlamaModel's, over this rank's chunks. The activations are the executor's measured
  // peak of the in-flight (micro-batch, chunk) slots with the running pass's temporaries, plus its
  // boundary buffers; the saved tensors' own peak is reported too (what the planner's "activations"
  // part predicts).
  RankMemoryUse memory_use() override {
    double bytes = 0;
    for (Stage& c : ex_->chunks()) {
      for (std::int64_t u = 0; u < c.unit_count(); ++u) {
        const parallel::fsdp::FlatUnit<T>& unit = c.unit(u);
        bytes += unit.step_peak_bytes();
      }
    }
    // The working peak includes the saved one (a forward's slot peaks at or above what it keeps).
    return {bytes, static_cast<double>(peak_working_bytes_ + peak_boundary_bytes_),
            static_cast<double>(peak_activation_bytes_)};
  }
  std::vector<ShardPiece<T>> shard_pieces() override { return pieces(false); }
  std::vector<ShardPiece<T>> load_pieces() override { return pieces(true); }
  Status after_load() override {
    for (Stage& c : ex_->chunks()) c.params_updated();
    return Status::Ok();
  }

  // Each pipeline rank writes its chunks' weights into a zeroed full buffer; the sum over the pipeline
  // group is exact because every weight lives on exactly one pipeline rank.
  Result<std::vector<std::pair<std::string, std::vector<T>>>> gather_full_weights() override {
    std::vector<T> full(static_cast<std::size_t>(full_count_), T(0));
    for (Stage& c : ex_->chunks()) HERD_RETURN_IF_ERROR(c.gather_full(false, full.data()));
    HERD_RETURN_IF_ERROR(ctx_.pp->all_reduce(full.data(), full.size(), comm::ReduceOp::kSum));
    std::vector<std::pair<std::string, std::vector<T>>> out;
    for (const model::Weight& w : table_) {
      const T* b = full.data() + w.offset;
      out.emplace_back(w.name, std::vector<T>(b, b + w.count()));
    }
    return out;
  }

 private:
  std::vector<ShardPiece<T>> pieces(bool for_load) {
    std::vector<ShardPiece<T>> out;
    for (Stage& c : ex_->chunks()) append_stage_pieces<T>(c, ctx_, for_load, out);
    return out;
  }

  parallel::ParallelContext ctx_;
  model::LlamaConfig cfg_;
  model::Recompute recompute_;
  std::vector<model::Weight> table_;  // the full layout: names and offsets in the flat buffer
  std::int64_t full_count_ = 0;
  std::unique_ptr<Executor> ex_;
  std::int64_t steps_ = 0;
  std::int64_t peak_activation_bytes_ = 0, peak_working_bytes_ = 0, peak_boundary_bytes_ = 0;
  std::int64_t boundary_bytes_ = 0;  // one (rows, d) boundary buffer
};

}  // namespace

template <typename T>
Result<std::unique_ptr<RankModel<T>>> make_pipeline_llama(const parallel::ParallelContext& ctx,
                                                          const model::LlamaConfig& m, const TrainConfig& cfg) {
  HERD_ASSIGN_OR_RETURN(ResolvedLayout r, resolve_layout(cfg));
  HERD_ASSIGN_OR_RETURN(schedule::ScheduleSpec spec, pipeline_spec(cfg));
  auto model = std::make_unique<PipelineLlamaModel<T>>(ctx, m, r.layout.recompute);
  HERD_RETURN_IF_ERROR(model->build(spec, r.layout.microbatch, cfg.data.seq_len));
  return std::unique_ptr<RankModel<T>>(std::move(model));
}

template Result<std::unique_ptr<RankModel<float>>> make_pipeline_llama<float>(const parallel::ParallelContext&,
                                                                              const model::LlamaConfig&,
                                                                              const TrainConfig&);
template Result<std::unique_ptr<RankModel<double>>> make_pipeline_llama<double>(const parallel::ParallelContext&,
                                                                                const model::LlamaConfig&,
                                                                                const TrainConfig&);

}  // namespace herd::train
