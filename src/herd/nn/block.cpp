// TransformerBlock forward and backward over the kernels/ ops.
//
// GEMM conventions (row-major, weights (out, in)):
//   y (N, out)   = x (N, in) W^T          gemm(kNo, kYes, N, out, in, 1, x, in, W, in, beta, y, out)
//   dW (out, in) += dy^T (out, N) x        gemm(kYes, kNo, out, in, N, 1, dy, out, x, in, 1, dW, in)
//   dx (N, in)   = dy (N, out) W           gemm(kNo, kNo, N, in, out, 1, dy, out, W, in, beta, dx, in)
// Gate and up are adjacent in the flat buffer, so their gradients go through one fused (N, 2f) buffer
// and two GEMMs instead of four.
#include "herd/nn/block.h"

#include <cstring>
#include <type_traits>

#include "herd/kernels/attention.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/rmsnorm.h"
#include "herd/kernels/swiglu.h"

namespace herd::nn {

using kernels::Trans;

namespace {

template <typename T>
void linear(const T* x, std::int64_t n, std::int64_t in, const T* w, std::int64_t out, T beta, T* y) {
  kernels::gemm<T>(Trans::kNo, Trans::kYes, n, out, in, T(1), x, in, w, in, beta, y, out);
}

template <typename T>
void linear_weight_grad(const T* dy, std::int64_t n, std::int64_t out, const T* x, std::int64_t in, T* dw) {
  kernels::gemm<T>(Trans::kYes, Trans::kNo, out, in, n, T(1), dy, out, x, in, T(1), dw, in);
}

template <typename T>
void linear_input_grad(const T* dy, std::int64_t n, std::int64_t out, const T* w, std::int64_t in, T beta, T* dx) {
  kernels::gemm<T>(Trans::kNo, Trans::kNo, n, in, out, T(1), dy, out, w, in, beta, dx, in);
}

kernels::AttentionDims attention_dims(const MicroBatch& mb, const LayerSizes& s) {
  kernels::AttentionDims d;
  d.batch = mb.batch;
  d.tq = mb.seq_len;
  d.tk = mb.seq_len;
  d.q_heads = s.heads;
  d.kv_heads = s.kv_heads;
  d.head_dim = s.head_dim;
  return d;
}

kernels::AttentionMask attention_mask(const MicroBatch& mb) {
  return {mb.positions, mb.doc_ids, mb.positions, mb.doc_ids};
}

}  // namespace

template <typename T>
TransformerBlock<T>::TransformerBlock(const LayerSizes& sizes, model::Recompute recompute, std::string tag_prefix,
                                      bool bf16_mode)
    : sizes_(sizes), layout_(sizes), recompute_(recompute), prefix_(std::move(tag_prefix)), bf16_(bf16_mode) {
  HERD_CHECK(!bf16_mode || (std::is_same_v<T, float>), "bf16 mode is a mode of the fp32 block");
}

template <typename T>
BlockState<T> TransformerBlock<T>::forward(tensor::Arena& arena, const MicroBatch& mb,
                                           const kernels::RopeTable<T>& rope, T* x) const {
  if (bf16_) return forward_bf16(arena, mb, rope, x);
  HERD_CHECK(w_ != nullptr, "TransformerBlock::forward before bind()");
  const std::int64_t n = mb.rows(), d = sizes_.hidden, f = sizes_.ffn;
  const std::int64_t nl = tp_ ? tp_->local_rows(n) : n;
  const bool none = recompute_ == model::Recompute::kNone;
  const bool full = recompute_ == model::Recompute::kFull;
  auto keep = [&](std::int64_t count, const char* name) { return arena.allocate_array<T>(count, prefix_ + name); };

  // The saved set, in the order of model::layer_saved_tensors.
  BlockState<T> st;
  st.mark = arena.mark();
  st.input = keep(nl * d, "attn_norm.input");
  if (!full) {
    st.attn_rstd = keep(nl, "attn_norm.rstd");
    if (none) st.attn_norm_out = keep(nl * d, "attn_norm.output");
    st.q = keep(n * sizes_.q_dim(), "attn.q");
    st.k = keep(n * sizes_.kv_dim(), "attn.k");
    st.v = keep(n * sizes_.kv_dim(), "attn.v");
    st.attn_out = keep(n * sizes_.q_dim(), "attn.out");
    st.lse = keep(n * sizes_.heads, "attn.lse");
    st.mlp_input = keep(nl * d, "mlp_norm.input");
    st.mlp_rstd = keep(nl, "mlp_norm.rstd");
    if (none) st.mlp_norm_out = keep(nl * d, "mlp_norm.output");
    st.gate = keep(n * f, "mlp.gate");
    st.up = keep(n * f, "mlp.up");
    if (none) st.act = keep(n * f, "mlp.act");
  }
  const tensor::Arena::Mark scratch = arena.mark();
  std::memcpy(st.input, x, sizeof(T) * static_cast<std::size_t>(nl * d));
  compute(arena, mb, rope, st, x);
  arena.reset(scratch);
  // Drop the pointers into the freed scratch: the backward re-materialises them.
  if (full) {
    BlockState<T> kept;
    kept.mark = st.mark;
    kept.input = st.input;
    st = kept;
  } else if (!none) {
    st.attn_norm_out = nullptr;
    st.mlp_norm_out = nullptr;
    st.act = nullptr;
  }
  return st;
}

template <typename T>
void TransformerBlock<T>::compute(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope,
                                  BlockState<T>& st, T* x_out) const {
  const std::int64_t n = mb.rows(), d = sizes_.hidden, f = sizes_.ffn;
  const std::int64_t qd = sizes_.q_dim(), kvd = sizes_.kv_dim();
  const std::int64_t nl = tp_ ? tp_->local_rows(n) : n;
  auto need = [&](T*& p, std::int64_t count) {
    if (!p) p = arena.allocate_array<T>(count, prefix_ + "scratch");
  };
  // Into a column-parallel linear: the norm output of all N rows (the local one itself on one rank).
  auto gathered = [&](const T* local) -> const T* {
    if (!tp_) return local;
    T* full = arena.allocate_array<T>(n * d, prefix_ + "scratch");
    tp_->gather(local, full, n, d);
    return full;
  };
  // out (n_loc, d) = residual + (a W^T) summed over TP ranks (row-parallel linear of width `in`).
  auto row_parallel = [&](const T* a, std::int64_t in, const T* w, const T* residual, T* out) {
    if (!tp_) {
      std::memcpy(out, residual, sizeof(T) * static_cast<std::size_t>(n * d));
      linear<T>(a, n, in, w, d, T(1), out);
      return;
    }
    T* partial = arena.allocate_array<T>(n * d, prefix_ + "scratch");
    linear<T>(a, n, in, w, d, T(0), partial);
    tp_->reduce(partial, out, n, d);
    for (std::int64_t i = 0; i < nl * d; ++i) out[i] += residual[i];
  };
  need(st.attn_rstd, nl);
  need(st.attn_norm_out, nl * d);
  need(st.q, n * qd);
  need(st.k, n * kvd);
  need(st.v, n * kvd);
  need(st.attn_out, n * qd);
  need(st.lse, n * sizes_.heads);
  need(st.mlp_input, nl * d);
  need(st.mlp_rstd, nl);
  need(st.mlp_norm_out, nl * d);
  need(st.gate, n * f);
  need(st.up, n * f);
  need(st.act, n * f);
  const LayerLayout& L = layout_;

  kernels::rmsnorm_forward<T>(st.input, d, w_ + L.attn_norm, nl, d, sizes_.norm_eps, st.attn_norm_out, d, st.attn_rstd);
  const T* attn_in = gathered(st.attn_norm_out);  // (N, d)
  linear<T>(attn_in, n, d, w_ + L.wq, qd, T(0), st.q);
  linear<T>(attn_in, n, d, w_ + L.wk, kvd, T(0), st.k);
  linear<T>(attn_in, n, d, w_ + L.wv, kvd, T(0), st.v);
  kernels::rope_forward<T>(rope, mb.positions, n, sizes_.heads, st.q, qd);
  kernels::rope_forward<T>(rope, mb.positions, n, sizes_.kv_heads, st.k, kvd);
  if (attn_) {
    attn_->forward(attention_dims(mb, sizes_), st.q, st.k, st.v, st.attn_out, st.lse);
  } else {
    kernels::attention_forward<T>(attention_dims(mb, sizes_), attention_mask(mb), st.q, st.k, st.v, st.attn_out,
                                  st.lse);
  }

  // h = input + attn_out Wo^T, built in mlp_input (the MLP norm's saved input is exactly h).
  row_parallel(st.attn_out, qd, w_ + L.wo, st.input, st.mlp_input);
  kernels::rmsnorm_forward<T>(st.mlp_input, d, w_ + L.mlp_norm, nl, d, sizes_.norm_eps, st.mlp_norm_out, d,
                              st.mlp_rstd);
  const T* mlp_in = gathered(st.mlp_norm_out);  // (N, d)
  linear<T>(mlp_in, n, d, w_ + L.w_gate, f, T(0), st.gate);
  linear<T>(mlp_in, n, d, w_ + L.w_up, f, T(0), st.up);
  kernels::swiglu_forward<T>(st.gate, f, st.up, f, n, f, st.act, f);
  if (x_out) row_parallel(st.act, f, w_ + L.w_down, st.mlp_input, x_out);
}

template <typename T>
void TransformerBlock<T>::backward(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope,
                                   BlockState<T>& st, T* dx) const {
  if (bf16_) {
    backward_bf16(arena, mb, rope, st, dx);
    return;
  }
  HERD_CHECK(g_ != nullptr && st.input != nullptr, "TransformerBlock::backward without bind() or forward state");
  const std::int64_t n = mb.rows(), d = sizes_.hidden, f = sizes_.ffn;
  const std::int64_t qd = sizes_.q_dim(), kvd = sizes_.kv_dim();
  const std::int64_t nl = tp_ ? tp_->local_rows(n) : n;
  const LayerLayout& L = layout_;
  auto scratch = [&](std::int64_t count) { return arena.allocate_array<T>(count, prefix_ + "scratch"); };
  // The adjoints of the forward's collectives: a row-parallel output's gradient is gathered to all N
  // rows, a column-parallel input's (partial over TP) gradient is reduced to this rank's rows.
  T* full_buf = tp_ ? scratch(n * d) : nullptr;
  auto gathered = [&](const T* local) -> const T* {
    if (!tp_) return local;
    tp_->gather(local, full_buf, n, d);
    return full_buf;
  };
  T* d_norm_local = tp_ ? scratch(nl * d) : nullptr;
  auto reduced = [&](const T* partial) -> const T* {
    if (!tp_) return partial;
    tp_->reduce(partial, d_norm_local, n, d);
    return d_norm_local;
  };

  if (recompute_ == model::Recompute::kFull) {
    compute(arena, mb, rope, st, nullptr);
  } else if (recompute_ == model::Recompute::kSelective) {
    // Elementwise only: the norms again (their rstd equals the saved one) and the SwiGLU product.
    T* rstd = scratch(nl);
    st.attn_norm_out = scratch(nl * d);
    kernels::rmsnorm_forward<T>(st.input, d, w_ + L.attn_norm, nl, d, sizes_.norm_eps, st.attn_norm_out, d, rstd);
    st.mlp_norm_out = scratch(nl * d);
    kernels::rmsnorm_forward<T>(st.mlp_input, d, w_ + L.mlp_norm, nl, d, sizes_.norm_eps, st.mlp_norm_out, d, rstd);
    st.act = scratch(n * f);
    kernels::swiglu_forward<T>(st.gate, f, st.up, f, n, f, st.act, f);
  }

  // MLP: out = h + act Wdown^T.
  T* d_act = scratch(n * f);
  const T* dy = gathered(dx);  // (N, d)
  linear_input_grad<T>(dy, n, d, w_ + L.w_down, f, T(0), d_act);
  linear_weight_grad<T>(dy, n, d, st.act, f, g_ + L.w_down);
  T* d_gu = scratch(n * 2 * f);  // (N, 2f): [dgate | dup] per row, matching the adjacent gate/up weights
  kernels::swiglu_backward<T>(d_act, f, st.gate, f, st.up, f, n, f, d_gu, 2 * f, d_gu + f, 2 * f);
  linear_weight_grad<T>(d_gu, n, 2 * f, gathered(st.mlp_norm_out), d, g_ + L.w_gate);
  T* d_norm = scratch(n * d);  // (N, d), partial over TP
  linear_input_grad<T>(d_gu, n, 2 * f, w_ + L.w_gate, d, T(0), d_norm);
  kernels::rmsnorm_backward<T>(reduced(d_norm), d, st.mlp_input, d, w_ + L.mlp_norm, st.mlp_rstd, nl, d, dx, d,
                               kernels::Accumulate::kAdd, g_ + L.mlp_norm);

  // Attention: h = input + attn_out Wo^T.
  T* d_ao = scratch(n * qd);
  dy = gathered(dx);
  linear_input_grad<T>(dy, n, d, w_ + L.wo, qd, T(0), d_ao);
  linear_weight_grad<T>(dy, n, d, st.attn_out, qd, g_ + L.wo);
  T* dq = scratch(n * qd);
  T* dk = scratch(n * kvd);
  T* dv = scratch(n * kvd);
  if (attn_) {
    attn_->backward(attention_dims(mb, sizes_), st.q, st.k, st.v, st.attn_out, st.lse, d_ao, dq, dk, dv);
  } else {
    kernels::attention_backward<T>(attention_dims(mb, sizes_), attention_mask(mb), st.q, st.k, st.v, st.attn_out,
                                   st.lse, d_ao, dq, dk, dv);
  }
  kernels::rope_backward<T>(rope, mb.positions, n, sizes_.heads, dq, qd);
  kernels::rope_backward<T>(rope, mb.positions, n, sizes_.kv_heads, dk, kvd);
  const T* attn_in = gathered(st.attn_norm_out);
  linear_weight_grad<T>(dq, n, qd, attn_in, d, g_ + L.wq);
  linear_weight_grad<T>(dk, n, kvd, attn_in, d, g_ + L.wk);
  linear_weight_grad<T>(dv, n, kvd, attn_in, d, g_ + L.wv);
  linear_input_grad<T>(dq, n, qd, w_ + L.wq, d, T(0), d_norm);
  linear_input_grad<T>(dk, n, kvd, w_ + L.wk, d, T(1), d_norm);
  linear_input_grad<T>(dv, n, kvd, w_ + L.wv, d, T(1), d_norm);
  kernels::rmsnorm_backward<T>(reduced(d_norm), d, st.input, d, w_ + L.attn_norm, st.attn_rstd, nl, d, dx, d,
                               kernels::Accumulate::kAdd, g_ + L.attn_norm);

  arena.reset(st.mark);
  st = BlockState<T>{};
}

template class TransformerBlock<float>;
template class TransformerBlock<double>;

}  // namespace herd::nn
