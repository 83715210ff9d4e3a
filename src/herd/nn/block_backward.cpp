// TransformerBlock's backward (block.h), written once for every precision like the forward (block.cpp):
// over the compute type T and the storage type S of saved tensors and matmul inputs, through
// block_precision.h's steps, which are the identity on pointers when S = T.
//
// Where bf16 mode rounds and widens here, and why: every GEMM input is bf16, so the output gradient dy
// is rounded where it enters the linears' GEMMs, the SwiGLU kernel writes its input gradients in bf16 and
// the RoPE input gradients dq, dk, dv are rounded after RoPE's backward; the GEMMs write fp32, the
// element-wise kernels (norms, RoPE, attention) run in fp32 on the widened saved tensors (the values the
// forward computed with), and the weight gradients accumulate in fp32 (beta = 1).
//
// The MLP half's temporaries (d_act, d_gate|up, d_norm: N x (3f + d)) are freed before the attention
// half allocates its own (d_ao, dq, dk, dv, d_norm and, in bf16 mode, the rounded dq, dk, dv): stacking
// them on the MLP's would raise the backward's peak to the sum of both halves instead of the larger one.
// Gate and up are adjacent in the flat buffer, so their gradients go through one fused (N, 2f) buffer
// and two GEMMs instead of four.
#include <type_traits>

#include "herd/kernels/ops.h"
#include "herd/nn/block.h"
#include "herd/nn/block_precision.h"

namespace herd::nn {

using block_precision::attention_dims;
using block_precision::attention_mask;
using block_precision::linear_input_grad;
using block_precision::linear_weight_grad;
using block_precision::rope_backward_rounded;
using block_precision::rounded;
using block_precision::Scratch;
using block_precision::widened;

template <typename T>
void TransformerBlock<T>::backward(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope,
                                   BlockState<T>& st, T* dx) const {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_) {
      backward_as<bf16>(arena, mb, rope, st, dx);
      return;
    }
  }
  backward_as<T>(arena, mb, rope, st, dx);
}

template <typename T>
template <typename S>
void TransformerBlock<T>::backward_as(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope,
                                      BlockState<T>& state, T* dx) const {
  SavedTensors<T, S>* saved = std::get_if<SavedTensors<T, S>>(&state.saved);
  HERD_CHECK(g_ != nullptr && weights<S>() != nullptr && saved != nullptr && saved->input != nullptr,
             "TransformerBlock::backward without ", bf16_ ? "bind_bf16()" : "bind()", " or forward state");
  SavedTensors<T, S>& st = *saved;
  const std::int64_t n = mb.rows(), d = sizes_.hidden, f = sizes_.ffn;
  const std::int64_t qd = sizes_.q_dim(), kvd = sizes_.kv_dim();
  const std::int64_t nl = tp_ ? tp_->local_rows(n) : n;
  const LayerLayout& L = layout_;
  const S* w = weights<S>();
  Scratch<T, S> scratch(arena, prefix_);
  // The adjoints of the forward's collectives: a row-parallel output's gradient is gathered to all N
  // rows, a column-parallel input's (partial over TP) gradient is reduced to this rank's rows.
  S* dy_s = scratch.s_copy(nl * d);
  S* all_rows = tp_ ? scratch.s(n * d) : nullptr;
  auto gathered = [&](const S* local) -> const S* {
    if (!tp_) return local;
    tp_->gather(local, all_rows, n, d);
    return all_rows;
  };
  T* d_norm_local = tp_ ? scratch.t(nl * d) : nullptr;
  auto reduced = [&](const T* partial) -> const T* {
    if (!tp_) return partial;
    tp_->reduce(partial, d_norm_local, n, d);
    return d_norm_local;
  };
  // dLoss/d(output) as the linears' GEMM input, on all N rows.
  auto output_grad = [&] { return gathered(rounded(*ops_, dx, nl * d, dy_s)); };
  const T* attn_norm_w = widened(*ops_, w + L.attn_norm, d, scratch.t_copy(d));
  const T* mlp_norm_w = widened(*ops_, w + L.mlp_norm, d, scratch.t_copy(d));

  if (recompute_ == model::Recompute::kFull) {
    compute<S>(arena, mb, rope, st, nullptr, nullptr);
  } else if (recompute_ == model::Recompute::kSelective) {
    // Element-wise only, from the saved tensors: the norms again (their rstd equals the saved one) and the
    // SwiGLU product.
    T* rstd = scratch.t(nl);
    st.attn_norm_out = scratch.s(nl * d);
    ops_->rmsnorm_forward(st.input, d, attn_norm_w, nl, d, sizes_.norm_eps, st.attn_norm_out, d, rstd);
    st.mlp_norm_out = scratch.s(nl * d);
    ops_->rmsnorm_forward(st.mlp_input, d, mlp_norm_w, nl, d, sizes_.norm_eps, st.mlp_norm_out, d, rstd);
    st.act = scratch.s(n * f);
    ops_->swiglu_forward(st.gate, f, st.up, f, n, f, st.act, f);
  }

  // MLP: out = h + act Wdown^T.
  const tensor::Arena::Mark mlp_half = arena.mark();
  const S* dy = output_grad();  // (N, d)
  T* d_act = scratch.t(n * f);
  linear_input_grad<T, S>(*ops_, dy, n, d, w + L.w_down, f, T(0), d_act);
  linear_weight_grad<T, S>(*ops_, dy, n, d, st.act, f, g_ + L.w_down);
  S* d_gu = scratch.s(n * 2 * f);  // (N, 2f): [dgate | dup] per row, matching the adjacent gate/up weights
  ops_->swiglu_backward(d_act, f, st.gate, f, st.up, f, n, f, d_gu, 2 * f, d_gu + f, 2 * f);
  linear_weight_grad<T, S>(*ops_, d_gu, n, 2 * f, gathered(st.mlp_norm_out), d, g_ + L.w_gate);
  T* d_norm = scratch.t(n * d);  // (N, d), partial over TP
  linear_input_grad<T, S>(*ops_, d_gu, n, 2 * f, w + L.w_gate, d, T(0), d_norm);
  ops_->rmsnorm_backward(reduced(d_norm), d, st.mlp_input, d, mlp_norm_w, st.mlp_rstd, nl, d, dx, d,
                         kernels::Accumulate::kAdd, g_ + L.mlp_norm);
  arena.reset(mlp_half);

  // Attention: h = input + attn_out Wo^T.
  dy = output_grad();
  T* d_ao = scratch.t(n * qd);
  linear_input_grad<T, S>(*ops_, dy, n, d, w + L.wo, qd, T(0), d_ao);
  linear_weight_grad<T, S>(*ops_, dy, n, d, st.attn_out, qd, g_ + L.wo);
  // Attention reads the saved q, k, v and output as they are (bf16 mode: the bf16 kernel, dO, P and dS
  // rounded where they enter its matmuls) and writes dq, dk, dv at T.
  T* dq = scratch.t(n * qd);
  T* dk = scratch.t(n * kvd);
  T* dv = scratch.t(n * kvd);
  if (attn_) {
    attn_->backward(attention_dims(mb, sizes_), st.q, st.k, st.v, st.attn_out, st.lse, d_ao, dq, dk, dv);
  } else {
    ops_->attention_backward(attention_dims(mb, sizes_), attention_mask(mb), st.q, st.k, st.v, st.attn_out, st.lse,
                             d_ao, dq, dk, dv);
  }
  const S* dq_s = rope_backward_rounded(*ops_, rope, mb.positions, n, sizes_.heads, dq, qd, scratch.s_copy(n * qd));
  const S* dk_s =
      rope_backward_rounded(*ops_, rope, mb.positions, n, sizes_.kv_heads, dk, kvd, scratch.s_copy(n * kvd));
  const S* dv_s = rounded(*ops_, dv, n * kvd, scratch.s_copy(n * kvd));
  const S* attn_in = gathered(st.attn_norm_out);
  linear_weight_grad<T, S>(*ops_, dq_s, n, qd, attn_in, d, g_ + L.wq);
  linear_weight_grad<T, S>(*ops_, dk_s, n, kvd, attn_in, d, g_ + L.wk);
  linear_weight_grad<T, S>(*ops_, dv_s, n, kvd, attn_in, d, g_ + L.wv);
  d_norm = scratch.t(n * d);
  linear_input_grad<T, S>(*ops_, dq_s, n, qd, w + L.wq, d, T(0), d_norm);
  linear_input_grad<T, S>(*ops_, dk_s, n, kvd, w + L.wk, d, T(1), d_norm);
  linear_input_grad<T, S>(*ops_, dv_s, n, kvd, w + L.wv, d, T(1), d_norm);
  ops_->rmsnorm_backward(reduced(d_norm), d, st.input, d, attn_norm_w, st.attn_rstd, nl, d, dx, d,
                         kernels::Accumulate::kAdd, g_ + L.attn_norm);

  arena.reset(state.mark);
  state = BlockState<T>{};
}

template void TransformerBlock<float>::backward(tensor::Arena&, const MicroBatch&, const kernels::RopeTable<float>&,
                                                BlockState<float>&, float*) const;
template void TransformerBlock<double>::backward(tensor::Arena&, const MicroBatch&, const kernels::RopeTable<double>&,
                                                 BlockState<double>&, double*) const;

}  // namespace herd::nn
