// RankModel (rank_model.h): this rank's chunks, the executor that runs the schedule over them, the
// optimizer step and the checkpoint pieces of its shards.
//
// A full weight (R, C) lives in one FSDP unit's TP-local flat buffer at [local_offset, local_offset +
// local_count): TP rank t's block of it, model::tp_block (model/weights.h: all of a replicated norm,
// a band of rows or of columns), stored row-major either way. This DP rank owns the unit elements
// [shard_begin, shard_begin + S), so its piece of the weight is the intersection, with e0/e1 measured
// from the start of the TP block.
#include "herd/parallel/rank_model.h"

#include <algorithm>
#include <cmath>

#include "herd/model/weights.h"
#include "herd/nn/model.h"
#include "herd/parallel/pp/plan.h"

namespace herd::parallel {

template <typename T>
RankModel<T>::RankModel(const ParallelContext& ctx, const model::LlamaConfig& cfg, const RankModelOptions& options)
    : ctx_(ctx), cfg_(cfg), opt_(options), table_(model::llama_weights(cfg, 1)) {
  for (const model::Weight& w : table_) full_count_ = std::max(full_count_, w.offset + w.count());
}

template <typename T>
RankModel<T>::~RankModel() = default;

template <typename T>
Result<std::unique_ptr<RankModel<T>>> RankModel<T>::make(const ParallelContext& ctx, const model::LlamaConfig& cfg,
                                                         const RankModelOptions& options) {
  HERD_CHECK(ctx.tp && ctx.pp && ctx.fsdp(), "RankModel needs the tp, pp and dp communicators");
  HERD_CHECK(ctx.cp_size() == 1 || ctx.cp, "cp > 1 needs the cp communicator");
  schedule::ScheduleSpec spec = options.schedule;
  if (spec.pp == 1) spec = {1, 1, spec.microbatches, 1, schedule::ScheduleKind::k1F1B};
  // One stage holds every layer: there are no ends to lighten.
  HERD_ASSIGN_OR_RETURN(pp::PipelinePlan plan, pp::plan_pipeline(cfg, spec, options.lighter_ends && spec.pp > 1));
  std::unique_ptr<RankModel> m(new RankModel(ctx, cfg, options));
  m->tpc_ = std::make_unique<tp::TpCollectives<T>>(*ctx.tp, ctx.sequence_parallel, ctx.ops());
  if (ctx.cp_size() > 1) m->cph_ = std::make_unique<cp::CpAttentionHooks<T>>(*ctx.cp, ctx.ops());
  m->rope_ = std::make_shared<const kernels::RopeTable<T>>(nn::rope_config(cfg), cfg.max_seq_len);
  // Chunk c of pipeline rank r is virtual stage r + c x PP. One stage (pp = 1) releases its units after
  // each backward; a pipeline keeps its chunks gathered across the step's micro-batches.
  const int r = ctx.pp->rank(), n_st = spec.pp * spec.v;
  std::vector<Stage> chunks;
  for (int c = 0; c < spec.v; ++c) {
    const int s = r + c * spec.pp;
    chunks.emplace_back(cfg, ctx, options.recompute, plan.layers.layers[static_cast<std::size_t>(s)], s == 0,
                        s == n_st - 1, m->tpc_.get(), m->cph_.get(), m->rope_,
                        /*release_after_backward=*/spec.pp == 1);
  }
  pp::ExecutorOptions eo;
  eo.micro_batch = options.micro_batch;
  eo.seq_len = options.seq_len / ctx.cp_size();
  eo.recv_lookahead = options.recv_lookahead;
  m->boundary_bytes_ = static_cast<std::int64_t>(eo.micro_batch * eo.seq_len * cfg.hidden * sizeof(T));
  HERD_ASSIGN_OR_RETURN(m->ex_, pp::PipelineExecutor<T>::make(ctx.pp, cfg, std::move(plan), std::move(chunks), eo));
  return m;
}

template <typename T>
void RankModel<T>::init_weights(std::uint64_t seed) {
  for (Stage& c : chunks()) c.init_weights(seed);  // each chunk its own shards
}

template <typename T>
void RankModel<T>::load_full(const T* full) {
  for (Stage& c : chunks()) c.load_full(full);
}

template <typename T>
Result<kernels::CrossEntropyLoss> RankModel<T>::forward_backward_step(const std::vector<nn::MicroBatch>& mbs,
                                                                      T loss_scale) {
  HERD_ASSIGN_OR_RETURN(pp::StepStats st, ex_->step(mbs, loss_scale));
  peak_activation_bytes_ = std::max(peak_activation_bytes_, st.peak_activation_bytes);
  peak_working_bytes_ = std::max(peak_working_bytes_, st.peak_working_bytes);
  peak_boundary_bytes_ = std::max(peak_boundary_bytes_, st.peak_boundary_buffers * boundary_bytes_);
  return kernels::CrossEntropyLoss{st.loss_sum, st.tokens};
}

template <typename T>
Result<kernels::CrossEntropyLoss> RankModel<T>::evaluate_step(const std::vector<nn::MicroBatch>& mbs) {
  if (ctx_.pp_size() > 1) {
    HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss r, forward_backward_step(mbs, T(0)));
    zero_grads();
    return r;
  }
  kernels::CrossEntropyLoss total;
  for (const nn::MicroBatch& mb : mbs) {
    HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss r, ex_->forward_only(mb));
    total.loss_sum += r.loss_sum;
    total.count += r.count;
  }
  return total;
}

template <typename T>
Status RankModel<T>::logits(const nn::MicroBatch& mb, T* out) {
  if (ctx_.pp_size() > 1) return make_error("logits need the whole model on one rank (pp = 1)");
  const Result<kernels::CrossEntropyLoss> r = ex_->forward_only(mb, out);
  if (!r.ok()) return r.error();
  return tpc_->status();
}

template <typename T>
Result<double> RankModel<T>::grad_norm() {
  double sq = 0;
  for (const Stage& c : chunks()) sq += c.counted_sum_squares();
  HERD_RETURN_IF_ERROR(ctx_.tp->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));
  HERD_RETURN_IF_ERROR(ctx_.fsdp()->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));  // every CP x DP shard
  if (ctx_.pp_size() > 1) {
    HERD_RETURN_IF_ERROR(ctx_.pp->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));  // different units
  }
  return std::sqrt(sq);
}

template <typename T>
void RankModel<T>::apply_update(const kernels::AdamWConfig& base, double lr, double max_norm, double norm) {
  kernels::AdamWConfig cfg = base;
  cfg.lr = lr;
  ++steps_;
  const double clip = max_norm > 0 ? kernels::clip_coefficient(norm, max_norm) : 1.0;
  for (Stage& c : chunks()) c.adamw(cfg, clip, steps_);
}

template <typename T>
Result<double> RankModel<T>::step(const kernels::AdamWConfig& cfg, double lr, double max_norm) {
  HERD_ASSIGN_OR_RETURN(const double norm, grad_norm());
  apply_update(cfg, lr, max_norm, norm);
  return norm;
}

template <typename T>
void RankModel<T>::after_load() {
  if (ctx_.device != kernels::Device::kCpu) {
    const kernels::Ops& ops = ctx_.ops();
    for (const typename Staged::Copy& c : loaded_.back) {
      ops.copy_from_host(c.host, c.device, sizeof(T) * static_cast<std::size_t>(c.count));
    }
  }
  for (Stage& c : chunks()) c.params_updated();
}

template <typename T>
RankMemoryUse RankModel<T>::memory_use() {
  double bytes = 0;
  for (Stage& c : ex_->chunks()) {
    for (std::int64_t u = 0; u < c.unit_count(); ++u) bytes += c.unit(u).step_peak_bytes();
  }
  // The working peak includes the saved one (a forward's slot peaks at or above what it keeps).
  RankMemoryUse use;
  use.state_bytes = bytes;
  use.arena_peak_bytes = static_cast<double>(peak_working_bytes_ + peak_boundary_bytes_);
  use.saved_activation_bytes = static_cast<double>(peak_activation_bytes_);
  return use;
}

// Each pipeline rank writes its chunks' weights into a zeroed full buffer; the sum over the pipeline
// group is exact because every weight lives on exactly one pipeline rank.
template <typename T>
Result<std::vector<T>> RankModel<T>::gather_full(bool grads) {
  // Host memory on every device (DistributedStage::gather_full reads device shards through host copies).
  std::vector<T> full(static_cast<std::size_t>(full_count_), T(0));
  for (Stage& c : chunks()) HERD_RETURN_IF_ERROR(c.gather_full(grads, full.data()));
  if (ctx_.pp_size() > 1) HERD_RETURN_IF_ERROR(ctx_.pp->all_reduce(full.data(), full.size(), comm::ReduceOp::kSum));
  return full;
}

template <typename T>
Result<std::vector<std::pair<std::string, std::vector<T>>>> RankModel<T>::gather_full_weights() {
  HERD_ASSIGN_OR_RETURN(std::vector<T> full, gather_full(false));
  std::vector<std::pair<std::string, std::vector<T>>> out;
  for (const model::Weight& w : table_) {
    const T* b = full.data() + w.offset;
    out.emplace_back(w.name, std::vector<T>(b, b + w.count()));
  }
  return out;
}

// for_load: replicated norms on every TP rank (each loads them); else on TP rank 0 only.
template <typename T>
std::vector<ShardPiece<T>> RankModel<T>::pieces(bool for_load) {
  const std::int64_t tp = ctx_.tp_size(), t = ctx_.tp_rank();
  std::vector<ShardPiece<T>> out;
  for (Stage& stage : chunks()) {
    for (const ShardedParam& p : stage.params()) {
      const model::Weight& w = p.w;
      if (!for_load && w.split == model::TpSplit::kReplicated && t != 0) continue;
      fsdp::FlatUnit<T>& unit = stage.unit(p.unit);
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
  if (ctx_.device != kernels::Device::kCpu) stage_on_host(out, for_load ? loaded_ : saved_, for_load);
  return out;
}

// Points the pieces at host copies of their device arrays (params, m, v; g too unless loading).
template <typename T>
void RankModel<T>::stage_on_host(std::vector<ShardPiece<T>>& pieces, Staged& st, bool for_load) {
  const kernels::Ops& ops = ctx_.ops();
  std::size_t total = 0;
  for (const ShardPiece<T>& p : pieces) total += 4 * static_cast<std::size_t>(p.count());
  st.host.assign(total, T(0));
  st.back.clear();
  std::size_t at = 0;
  for (ShardPiece<T>& p : pieces) {
    for (T** array : {&p.param, &p.m, &p.v, &p.g}) {
      T* host = st.host.data() + at;
      at += static_cast<std::size_t>(p.count());
      // Current values first, so a loader that leaves elements alone keeps them.
      ops.copy_to_host(*array, host, sizeof(T) * static_cast<std::size_t>(p.count()));
      if (for_load && array != &p.g) {
        st.back.push_back({*array, host, p.count()});
      }
      *array = host;
    }
  }
}

template class RankModel<float>;
template class RankModel<double>;

}  // namespace herd::parallel
