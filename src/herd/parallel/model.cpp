// DistributedLlama: the layout checks, and one DistributedStage holding every unit driven through a
// micro-batch's forward and backward and the sharded optimizer step (see model.h).
#include "herd/parallel/model.h"

#include <cmath>
#include <cstring>
#include <numeric>

#include "herd/model/shard.h"
#include "herd/nn/model.h"

namespace herd::parallel {

Status validate_layout(const model::LlamaConfig& cfg, const topology::ParallelDims& dims, std::int64_t world_size,
                       std::int64_t global_batch, std::int64_t seq_len, bool sequence_parallel) {
  HERD_RETURN_IF_ERROR(dims.check_world(world_size));
  HERD_RETURN_IF_ERROR(model::check_shardable(
      cfg,
      model::ShardSpec{.tp = dims.tp(), .cp = dims.cp(), .seq_len = seq_len, .sequence_parallel = sequence_parallel}));
  return model::check_dp_divides_batch(global_batch, dims.dp());
}

Result<std::int64_t> global_real_tokens(const ParallelContext& ctx, std::int64_t local_count) {
  std::int64_t n = local_count;
  if (ctx.cp && ctx.cp_size() > 1) HERD_RETURN_IF_ERROR(ctx.cp->all_reduce<std::int64_t>(&n, 1, comm::ReduceOp::kSum));
  if (ctx.dp) HERD_RETURN_IF_ERROR(ctx.dp->all_reduce<std::int64_t>(&n, 1, comm::ReduceOp::kSum));
  return n;
}

template <typename T>
DistributedLlama<T>::DistributedLlama(const model::LlamaConfig& cfg, const ParallelContext& ctx,
                                      model::Recompute recompute, std::int64_t micro_batch, std::int64_t seq_len)
    : cfg_(cfg), ctx_(ctx), max_rows_(micro_batch * (seq_len / ctx.cp_size())), max_seq_(seq_len / ctx.cp_size()) {
  HERD_CHECK(ctx.tp && ctx.dp && ctx.fsdp(), "DistributedLlama needs the tp and dp communicators");
  HERD_CHECK(ctx.pp_size() == 1, "DistributedLlama covers tp x cp x dp; got ", ctx.dims.to_string());
  HERD_CHECK(ctx.cp_size() == 1 || (ctx.cp && ctx.dp_cp), "cp > 1 needs the cp and dp_cp communicators");
  const Status valid = validate_layout(cfg, ctx.dims, ctx.dims.world(), ctx.dp_size(), seq_len, ctx.sequence_parallel);
  HERD_CHECK(valid.ok(), valid.error().message());
  tpc_ = std::make_unique<tp::TpCollectives<T>>(*ctx.tp, ctx.sequence_parallel);
  if (ctx.cp_size() > 1) cph_ = std::make_unique<cp::CpAttentionHooks<T>>(*ctx.cp);
  std::vector<int> layers(static_cast<std::size_t>(cfg.n_layers));
  std::iota(layers.begin(), layers.end(), 0);
  const kernels::RopeConfig rc = nn::rope_config(cfg);
  auto rope = std::make_shared<const kernels::RopeTable<T>>(rc, cfg.max_seq_len);
  stage_ = std::make_unique<DistributedStage<T>>(cfg, ctx, recompute, std::move(layers), true, true, tpc_.get(),
                                                 cph_.get(), std::move(rope), /*release_after_backward=*/true);
  for (const ShardedParam& p : stage_->params()) full_count_ = std::max(full_count_, p.w.offset + p.w.count());
  // The stage's slot bound plus the two (n_loc, d) residual streams.
  const std::int64_t d = cfg.hidden;
  arena_ = std::make_unique<tensor::Arena>(
      static_cast<std::size_t>(stage_->slot_bytes(micro_batch, max_seq_) + 2 * max_rows_ * d * sizeof(T) + 64 * 64));
}

template <typename T>
DistributedLlama<T>::~DistributedLlama() = default;

template <typename T>
void DistributedLlama<T>::init_weights(std::uint64_t seed) {
  stage_->init_weights(seed);  // each rank its own shards, from the elements' global indices
}

template <typename T>
Result<std::vector<T>> DistributedLlama<T>::gather_full(bool grads) {
  std::vector<T> full(static_cast<std::size_t>(full_count_));
  HERD_RETURN_IF_ERROR(stage_->gather_full(grads, full.data()));
  return full;
}

template <typename T>
Result<kernels::CrossEntropyLoss> DistributedLlama<T>::forward_backward(const nn::MicroBatch& mb, T loss_scale,
                                                                        bool last_micro_batch) {
  HERD_CHECK(mb.rows() <= max_rows_ && mb.seq_len <= max_seq_, "micro-batch (", mb.batch, ", ", mb.seq_len,
             ") exceeds the model's sizing");
  if (cph_) HERD_RETURN_IF_ERROR(cph_->set_micro_batch(mb));  // one mask for every layer
  const std::int64_t nl = tpc_->local_rows(mb.rows()), d = cfg_.hidden;
  tensor::Arena& a = *arena_;
  const tensor::Arena::Mark start = a.mark();
  T* x = a.allocate_array<T>(nl * d, "residual");  // (n_loc, d): the residual, then its gradient
  HERD_ASSIGN_OR_RETURN(typename DistributedStage<T>::State st, stage_->forward(a, mb, x, loss_scale, true));
  const kernels::CrossEntropyLoss loss = st.loss;
  HERD_RETURN_IF_ERROR(stage_->backward(a, mb, st, loss_scale, x, last_micro_batch));
  a.reset(start);
  HERD_RETURN_IF_ERROR(stage_->wait_grads());
  return loss;
}

template <typename T>
Result<kernels::CrossEntropyLoss> DistributedLlama<T>::evaluate(const nn::MicroBatch& mb) {
  HERD_CHECK(mb.rows() <= max_rows_ && mb.seq_len <= max_seq_, "micro-batch (", mb.batch, ", ", mb.seq_len,
             ") exceeds the model's sizing");
  if (cph_) HERD_RETURN_IF_ERROR(cph_->set_micro_batch(mb));
  tensor::Arena& a = *arena_;
  const tensor::Arena::Mark start = a.mark();
  T* x = a.allocate_array<T>(tpc_->local_rows(mb.rows()) * cfg_.hidden, "residual");
  // Without fusing the head, the last stage computes the loss only in the forward (no gradient GEMMs).
  HERD_ASSIGN_OR_RETURN(typename DistributedStage<T>::State st, stage_->forward(a, mb, x, T(0), false));
  a.reset(start);
  // What a backward would have released: the units gathered by this forward.
  for (std::int64_t u = 0; u < stage_->unit_count(); ++u) stage_->unit(u).release();
  return st.loss;
}

template <typename T>
Status DistributedLlama<T>::logits(const nn::MicroBatch& mb, T* out) {
  HERD_CHECK(mb.rows() <= max_rows_ && mb.seq_len <= max_seq_, "micro-batch (", mb.batch, ", ", mb.seq_len,
             ") exceeds the model's sizing");
  if (cph_) HERD_RETURN_IF_ERROR(cph_->set_micro_batch(mb));
  tensor::Arena& a = *arena_;
  const tensor::Arena::Mark start = a.mark();
  T* x = a.allocate_array<T>(tpc_->local_rows(mb.rows()) * cfg_.hidden, "residual");
  HERD_ASSIGN_OR_RETURN(typename DistributedStage<T>::State st, stage_->forward(a, mb, x, T(0), false));
  stage_->head_logits(a, mb.rows(), st, out);
  a.reset(start);
  for (std::int64_t u = 0; u < stage_->unit_count(); ++u) stage_->unit(u).release();
  return tpc_->status();
}

template <typename T>
Result<double> DistributedLlama<T>::grad_norm() {
  double sq = stage_->counted_sum_squares();
  HERD_RETURN_IF_ERROR(ctx_.tp->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));
  HERD_RETURN_IF_ERROR(ctx_.fsdp()->all_reduce<double>(&sq, 1, comm::ReduceOp::kSum));  // every CP x DP shard
  return std::sqrt(sq);
}

template <typename T>
void DistributedLlama<T>::apply(const kernels::AdamWConfig& base, double lr, double max_norm, double norm) {
  kernels::AdamWConfig cfg = base;
  cfg.lr = lr;
  ++step_;
  stage_->adamw(cfg, max_norm > 0 ? kernels::clip_coefficient(norm, max_norm) : 1.0, step_);
}

template <typename T>
Result<double> DistributedLlama<T>::step(const kernels::AdamWConfig& base, double lr, double max_norm) {
  HERD_ASSIGN_OR_RETURN(const double norm, grad_norm());
  apply(base, lr, max_norm, norm);
  return norm;
}

template class DistributedLlama<float>;
template class DistributedLlama<double>;

}  // namespace herd::parallel
