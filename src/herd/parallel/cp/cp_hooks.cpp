// CpAttentionHooks (cp_hooks.h): the per-micro-batch mask and the block's attention under CP.
#include "herd/parallel/cp/cp_hooks.h"

#include "herd/core/check.h"

namespace herd::parallel::cp {

template <typename T>
Status CpAttentionHooks<T>::set_micro_batches(const std::vector<nn::MicroBatch>& mbs) {
  masks_.resize(mbs.size());
  cur_ = nullptr;
  for (std::size_t i = 0; i < mbs.size(); ++i) {
    const nn::MicroBatch& mb = mbs[i];
    Result<CpMask> m = make_cp_mask(*cp_, mb.batch, mb.seq_len * cp_->size(), mb.positions, mb.doc_ids);
    if (!m.ok()) {
      record(m.error());
      return m.error();
    }
    masks_[i] = std::move(*m);
    masks_[i].place(*ws_.ops);  // where the attention kernel reads it
  }
  return Status::Ok();
}

template <typename T>
Status CpAttentionHooks<T>::set_micro_batch(const nn::MicroBatch& mb) {
  HERD_RETURN_IF_ERROR(set_micro_batches({mb}));
  select(0);
  return Status::Ok();
}

template <typename T>
void CpAttentionHooks<T>::forward(const kernels::AttentionDims& d, const T* q, const T* k, const T* v, T* out,
                                  T* lse) const {
  if (!status_.ok()) return;
  HERD_CHECK(cur_ != nullptr, "CP attention without a selected mask");
  record(cp_attention_forward<T, T>(*cp_, *cur_, d, q, k, v, out, lse, ws_));
}

template <typename T>
void CpAttentionHooks<T>::backward(const kernels::AttentionDims& d, const T* q, const T* k, const T* v, const T* out,
                                   const T* lse, const T* dout, T* dq, T* dk, T* dv) const {
  if (!status_.ok()) return;
  HERD_CHECK(cur_ != nullptr, "CP attention without a selected mask");
  record(cp_attention_backward<T, T>(*cp_, *cur_, d, q, k, v, out, lse, dout, dq, dk, dv, ws_));
}

template <typename T>
void CpAttentionHooks<T>::forward(const kernels::AttentionDims& d, const bf16* q, const bf16* k, const bf16* v,
                                  float* out, float* lse) const {
  if (!status_.ok()) return;
  HERD_CHECK(cur_ != nullptr, "CP attention without a selected mask");
  record(cp_attention_forward<bf16, float>(*cp_, *cur_, d, q, k, v, out, lse, ws_bf16_));
}

template <typename T>
void CpAttentionHooks<T>::backward(const kernels::AttentionDims& d, const bf16* q, const bf16* k, const bf16* v,
                                   const bf16* out, const float* lse, const float* dout, float* dq, float* dk,
                                   float* dv) const {
  if (!status_.ok()) return;
  HERD_CHECK(cur_ != nullptr, "CP attention without a selected mask");
  record(cp_attention_backward<bf16, float>(*cp_, *cur_, d, q, k, v, out, lse, dout, dq, dk, dv, ws_bf16_));
}

template class CpAttentionHooks<float>;
template class CpAttentionHooks<double>;

}  // namespace herd::parallel::cp
