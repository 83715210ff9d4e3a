// TpCollectives and the vocab-parallel embedding and loss (see collectives.h).
#include "herd/parallel/tp/collectives.h"

#include "herd/core/check.h"

namespace herd::parallel::tp {

namespace {
std::size_t ucount(std::int64_t n) { return static_cast<std::size_t>(n); }
}  // namespace

template <typename T>
void TpCollectives<T>::gather(const T* local, T* full, std::int64_t n, std::int64_t cols) const {
  if (!sp_ || tp_->size() == 1) {  // every rank holds all rows: nothing to communicate
    if (full != local) ops_->copy(local, full, sizeof(T) * ucount(n * cols));
    return;
  }
  if (!status_.ok()) return;
  record(tp_->all_gather(local, full, ucount(local_rows(n) * cols), dtype_of<T>()));
}

template <typename T>
void TpCollectives<T>::gather(const bf16* local, bf16* full, std::int64_t n, std::int64_t cols) const {
  if (!sp_ || tp_->size() == 1) {
    if (full != local) ops_->copy(local, full, sizeof(bf16) * ucount(n * cols));
    return;
  }
  if (!status_.ok()) return;
  record(tp_->all_gather(local, full, ucount(local_rows(n) * cols), DType::kBF16));
}

template <typename T>
void TpCollectives<T>::reduce(const T* partial, T* local, std::int64_t n, std::int64_t cols) const {
  if (!status_.ok()) return;
  if (tp_->size() == 1) {  // the partial sum is the sum
    if (local != partial) ops_->copy(partial, local, sizeof(T) * ucount(n * cols));
    return;
  }
  if (sp_) {
    record(tp_->reduce_scatter(partial, local, ucount(local_rows(n) * cols), dtype_of<T>(), comm::ReduceOp::kSum));
  } else {
    record(tp_->all_reduce(partial, local, ucount(n * cols), dtype_of<T>(), comm::ReduceOp::kSum));
  }
}

template <typename T>
void TpCollectives<T>::all_reduce(T* buf, std::int64_t count) const {
  if (!status_.ok() || tp_->size() == 1) return;
  record(tp_->all_reduce(buf, ucount(count), dtype_of<T>(), comm::ReduceOp::kSum));
}

template <typename T>
void TpCollectives<T>::all_gather(const T* send, T* recv, std::int64_t count) const {
  if (!status_.ok()) return;
  record(tp_->all_gather(send, recv, ucount(count), dtype_of<T>()));
}

VocabShard vocab_shard(std::int64_t vocab, int tp_size, int tp_rank) {
  const std::int64_t rows = vocab / tp_size;
  return {rows * tp_rank, rows};
}

template <typename T>
void vocab_embedding_forward(const TpCollectives<T>& c, const std::int32_t* ids, std::int64_t n, const T* table,
                             VocabShard shard, std::int64_t d, T* full, T* x) {
  c.ops().embedding_forward(ids, n, table, shard.begin, shard.rows, d, full);  // zero rows off-shard
  c.reduce(full, x, n, d);
}

template <typename T>
void vocab_embedding_backward(const TpCollectives<T>& c, const std::int32_t* ids, std::int64_t n, const T* dx,
                              VocabShard shard, std::int64_t d, T* full, T* dtable) {
  c.gather(dx, full, n, d);
  c.ops().embedding_backward(ids, n, full, shard.begin, shard.rows, d, dtable);
}

void vocab_embedding_forward(const TpCollectives<float>& c, const std::int32_t* ids, std::int64_t n, const bf16* table,
                             VocabShard shard, std::int64_t d, float* full, float* x) {
  c.ops().embedding_forward(ids, n, table, shard.begin, shard.rows, d, full);
  c.reduce(full, x, n, d);
}

namespace {

// In: the element type of h and w (T, or bf16 with T = float).
template <typename T, typename In>
kernels::CrossEntropyLoss vocab_ce(const TpCollectives<T>& c, const In* h, std::int64_t n, std::int64_t d, const In* w,
                                   VocabShard shard, const std::int32_t* targets, T scale, T* lse, T* dh, T* dw,
                                   T* stats) {
  const int tp = c.size();
  const kernels::Ops& ops = c.ops();
  const bool loss_only = dh == nullptr && dw == nullptr;
  HERD_CHECK(loss_only || (dh != nullptr && dw != nullptr),
             "vocab_cross_entropy: dh and dw are both given or both null");
  // One rank holds the whole vocabulary: the fused sweep, which reuses each row tile's logits for its
  // gradient when the vocabulary fits one tile (the same numbers, one logits GEMM fewer).
  if (tp == 1 && !loss_only) {
    return ops.cross_entropy_forward_backward(h, n, d, w, shard.rows, targets, scale, lse, dh, dw);
  }
  // Local (max | sum-exp | target logit), 3n, packed so one all-gather carries all three, then
  // regrouped shard-major, (3, tp, n), as ce_combine_stats reads them.
  T* mine = stats;
  T* all = mine + 3 * n;            // (tp, 3, n)
  T* regrouped = all + 3 * n * tp;  // (3, tp, n)
  ops.ce_shard_stats(h, n, d, w, shard.begin, shard.rows, targets, mine, mine + n, mine + 2 * n);
  c.all_gather(mine, all, 3 * n);
  for (int s = 0; s < tp; ++s) {  // row k of shard s -> (k, s): three rows of n, 3n apart to tp n apart
    ops.copy_rows(all + s * 3 * n, sizeof(T) * ucount(n), regrouped + s * n, sizeof(T) * ucount(tp * n),
                  sizeof(T) * ucount(n), 3);
  }
  const kernels::CrossEntropyLoss loss =
      ops.ce_combine_stats(n, tp, regrouped, regrouped + tp * n, regrouped + 2 * tp * n, targets, lse);
  if (!loss_only) ops.ce_shard_backward(h, n, d, w, shard.begin, shard.rows, targets, lse, scale, dh, dw);
  return loss;
}

}  // namespace

template <typename T>
kernels::CrossEntropyLoss vocab_cross_entropy(const TpCollectives<T>& c, const T* h, std::int64_t n, std::int64_t d,
                                              const T* w, VocabShard shard, const std::int32_t* targets, T scale,
                                              T* lse, T* dh, T* dw, T* stats) {
  return vocab_ce<T, T>(c, h, n, d, w, shard, targets, scale, lse, dh, dw, stats);
}

kernels::CrossEntropyLoss vocab_cross_entropy(const TpCollectives<float>& c, const bf16* h, std::int64_t n,
                                              std::int64_t d, const bf16* w, VocabShard shard,
                                              const std::int32_t* targets, float scale, float* lse, float* dh,
                                              float* dw, float* stats) {
  return vocab_ce<float, bf16>(c, h, n, d, w, shard, targets, scale, lse, dh, dw, stats);
}

#define HERD_TP_INSTANTIATE(T)                                                                                       \
  template class TpCollectives<T>;                                                                                   \
  template void vocab_embedding_forward<T>(const TpCollectives<T>&, const std::int32_t*, std::int64_t, const T*,     \
                                           VocabShard, std::int64_t, T*, T*);                                        \
  template void vocab_embedding_backward<T>(const TpCollectives<T>&, const std::int32_t*, std::int64_t, const T*,    \
                                            VocabShard, std::int64_t, T*, T*);                                       \
  template kernels::CrossEntropyLoss vocab_cross_entropy<T>(const TpCollectives<T>&, const T*, std::int64_t,         \
                                                            std::int64_t, const T*, VocabShard, const std::int32_t*, \
                                                            T, T*, T*, T*, T*);
HERD_TP_INSTANTIATE(float)
HERD_TP_INSTANTIATE(double)

}  // namespace herd::parallel::tp
