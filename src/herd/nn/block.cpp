// TransformerBlock's forward (block.h), written once for every precision: over the compute type T and
// the storage type S of saved tensors and matmul inputs (S = T for the fp32 and fp64 blocks, bf16 in
// bf16 mode). block_precision.h holds the steps where bf16 mode rounds or widens; with S = T they are the
// identity on pointers, so those blocks compute every tensor in place in its saved buffer, as before
// bf16 mode existed. The backward is block_backward.cpp.
//
// Where bf16 mode rounds, and why there (docs/precision.md has the table):
//   - Each saved tensor is rounded once, when it is made, and every later reader (the forward's next
//     kernel, the backward, a recompute) reads that rounded value, so forward and backward see the same
//     numbers: the norms run on the widened bf16 copy of their input (the copy their backward gets),
//     q, k, v (after RoPE) are rounded into their saved buffers, which the bf16 attention kernel reads
//     (forward and backward, locally or under CP), and the SwiGLU kernels read
//     the bf16 gate and up and write their product in bf16 (no fp32 copies of the MLP-width tensors).
//   - The residual stream stays fp32: h = x + o and out = h + down are fp32 sums of the fp32 residual and
//     the fp32 GEMM output; only the copies saved for the norm backward are bf16.
// Under full recompute the layer is rebuilt from the bf16 copy of its input, so its residual is the
// rounded input (the forward used the fp32 one): a difference of one bf16 rounding of x, far inside the
// tolerances of docs/precision.md.
#include "herd/nn/block.h"

#include <type_traits>

#include "herd/kernels/ops.h"
#include "herd/nn/block_precision.h"

namespace herd::nn {

using block_precision::attention_dims;
using block_precision::attention_mask;
using block_precision::linear;
using block_precision::linear_saved;
using block_precision::rope_store;
using block_precision::Scratch;
using block_precision::staged;
using block_precision::store;
using block_precision::widened;

template <typename T>
TransformerBlock<T>::TransformerBlock(const LayerSizes& sizes, model::Recompute recompute, std::string tag_prefix,
                                      bool bf16_mode, const kernels::Ops& ops)
    : sizes_(sizes),
      layout_(sizes),
      recompute_(recompute),
      prefix_(std::move(tag_prefix)),
      bf16_(bf16_mode),
      ops_(&ops) {
  HERD_CHECK(!bf16_mode || (std::is_same_v<T, float>), "bf16 mode is a mode of the fp32 block");
}

template <typename T>
BlockState<T> TransformerBlock<T>::forward(tensor::Arena& arena, const MicroBatch& mb,
                                           const kernels::RopeTable<T>& rope, T* x) const {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_) return forward_as<bf16>(arena, mb, rope, x);
  }
  return forward_as<T>(arena, mb, rope, x);
}

template <typename T>
template <typename S>
BlockState<T> TransformerBlock<T>::forward_as(tensor::Arena& arena, const MicroBatch& mb,
                                              const kernels::RopeTable<T>& rope, T* x) const {
  HERD_CHECK(weights<S>() != nullptr, "TransformerBlock::forward before ", bf16_ ? "bind_bf16()" : "bind()");
  const std::int64_t n = mb.rows(), d = sizes_.hidden, f = sizes_.ffn;
  const std::int64_t nl = tp_ ? tp_->local_rows(n) : n;
  const bool none = recompute_ == model::Recompute::kNone;
  const bool full = recompute_ == model::Recompute::kFull;
  auto keep = [&]<typename U>(U*& p, std::int64_t count, const char* name) {
    p = arena.allocate_array<U>(count, prefix_ + name);
  };

  // The saved set, in the order of model::layer_saved_tensors, at its types.
  BlockState<T> state;
  state.mark = arena.mark();
  SavedTensors<T, S>& st = state.saved.template emplace<SavedTensors<T, S>>();
  keep(st.input, nl * d, "attn_norm.input");
  if (!full) {
    keep(st.attn_rstd, nl, "attn_norm.rstd");
    if (none) keep(st.attn_norm_out, nl * d, "attn_norm.output");
    keep(st.q, n * sizes_.q_dim(), "attn.q");
    keep(st.k, n * sizes_.kv_dim(), "attn.k");
    keep(st.v, n * sizes_.kv_dim(), "attn.v");
    keep(st.attn_out, n * sizes_.q_dim(), "attn.out");
    keep(st.lse, n * sizes_.heads, "attn.lse");
    keep(st.mlp_input, nl * d, "mlp_norm.input");
    keep(st.mlp_rstd, nl, "mlp_norm.rstd");
    if (none) keep(st.mlp_norm_out, nl * d, "mlp_norm.output");
    keep(st.gate, n * f, "mlp.gate");
    keep(st.up, n * f, "mlp.up");
    if (none) keep(st.act, n * f, "mlp.act");
  }
  const tensor::Arena::Mark scratch = arena.mark();
  store(*ops_, x, nl * d, st.input);
  compute<S>(arena, mb, rope, st, x, x);
  arena.reset(scratch);
  // Drop the pointers into the freed scratch: the backward re-materialises them.
  if (full) {
    st = SavedTensors<T, S>{.input = st.input};
  } else if (!none) {
    st.attn_norm_out = nullptr;
    st.mlp_norm_out = nullptr;
    st.act = nullptr;
  }
  return state;
}

template <typename T>
template <typename S>
void TransformerBlock<T>::compute(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope,
                                  SavedTensors<T, S>& st, const T* residual, T* x_out) const {
  const std::int64_t n = mb.rows(), d = sizes_.hidden, f = sizes_.ffn;
  const std::int64_t qd = sizes_.q_dim(), kvd = sizes_.kv_dim();
  const std::int64_t nl = tp_ ? tp_->local_rows(n) : n;
  Scratch<T, S> scratch(arena, prefix_);
  auto need = [&]<typename U>(U*& p, std::int64_t count) {
    if (!p) p = arena.allocate_array<U>(count, prefix_ + "scratch");
  };
  // Into a column-parallel linear: the norm output of all N rows (the local one itself on one rank).
  auto gathered = [&](const S* local) -> const S* {
    if (!tp_) return local;
    S* all = scratch.s(n * d);
    tp_->gather(local, all, n, d);
    return all;
  };
  // out (n_loc, d) = res + (a W^T) summed over TP ranks (row-parallel linear of width `in`).
  auto row_parallel = [&](const S* a, std::int64_t in, const S* w, const T* res, T* out) {
    if (!tp_) {  // out may be res itself: the GEMM then adds onto it in place
      if (out != res) ops_->copy(res, out, sizeof(T) * static_cast<std::size_t>(n * d));
      linear<T, S>(*ops_, a, n, in, w, d, T(1), out);
      return;
    }
    T* partial = scratch.t(n * d);
    linear<T, S>(*ops_, a, n, in, w, d, T(0), partial);
    tp_->reduce(partial, out, n, d);
    ops_->add(res, nl * d, out);
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
  const S* w = weights<S>();

  const T* attn_norm_w = widened(*ops_, w + L.attn_norm, d, scratch.t_copy(d));
  const T* mlp_norm_w = widened(*ops_, w + L.mlp_norm, d, scratch.t_copy(d));
  // The norms read their inputs as saved and write their outputs as saved (kernels/rmsnorm.h has both
  // storage types: in bf16 mode, widened as read and rounded as written), as their backward sees them.
  ops_->rmsnorm_forward(st.input, d, attn_norm_w, nl, d, sizes_.norm_eps, st.attn_norm_out, d, st.attn_rstd);
  const S* attn_in = gathered(st.attn_norm_out);  // (N, d)
  T* q = staged(st.q, scratch.t_copy(n * qd));
  T* k = staged(st.k, scratch.t_copy(n * kvd));
  linear<T, S>(*ops_, attn_in, n, d, w + L.wq, qd, T(0), q);
  linear<T, S>(*ops_, attn_in, n, d, w + L.wk, kvd, T(0), k);
  linear_saved<T, S>(*ops_, attn_in, n, d, w + L.wv, kvd, st.v);  // v has no RoPE: saved as the GEMM writes it
  rope_store(*ops_, rope, mb.positions, n, sizes_.heads, q, qd, st.q);
  rope_store(*ops_, rope, mb.positions, n, sizes_.kv_heads, k, kvd, st.k);
  // Attention reads q, k, v as saved: in bf16 mode the bf16 kernel (fp32 sums and statistics, P rounded
  // before P V), locally or under CP.
  T* attn_out = staged(st.attn_out, scratch.t_copy(n * qd));
  if (attn_) {
    attn_->forward(attention_dims(mb, sizes_), st.q, st.k, st.v, attn_out, st.lse);
  } else {
    ops_->attention_forward(attention_dims(mb, sizes_), attention_mask(mb), st.q, st.k, st.v, attn_out, st.lse);
  }
  store(*ops_, attn_out, n * qd, st.attn_out);

  // h = residual + attn_out Wo^T at T; saved (rounded, in bf16 mode) as the MLP norm's input. The
  // forward without TP keeps h in the residual stream itself (residual is x_out): both row-parallel
  // linears then add onto it in place instead of copying their residual first (the same sums).
  T* h = !tp_ && x_out != nullptr && residual == x_out ? x_out : staged(st.mlp_input, scratch.t_copy(nl * d));
  row_parallel(st.attn_out, qd, w + L.wo,
               residual ? residual : widened(*ops_, st.input, nl * d, scratch.t_copy(nl * d)), h);
  store(*ops_, h, nl * d, st.mlp_input);
  ops_->rmsnorm_forward(st.mlp_input, d, mlp_norm_w, nl, d, sizes_.norm_eps, st.mlp_norm_out, d, st.mlp_rstd);
  const S* mlp_in = gathered(st.mlp_norm_out);                        // (N, d)
  linear_saved<T, S>(*ops_, mlp_in, n, d, w + L.w_gate, f, st.gate);  // SwiGLU reads them as saved
  linear_saved<T, S>(*ops_, mlp_in, n, d, w + L.w_up, f, st.up);
  ops_->swiglu_forward(st.gate, f, st.up, f, n, f, st.act, f);
  if (x_out) row_parallel(st.act, f, w + L.w_down, h, x_out);
}

template class TransformerBlock<float>;
template class TransformerBlock<double>;
// Full recompute calls compute from block_backward.cpp.
template void TransformerBlock<float>::compute<float>(tensor::Arena&, const MicroBatch&,
                                                      const kernels::RopeTable<float>&, SavedTensors<float, float>&,
                                                      const float*, float*) const;
template void TransformerBlock<float>::compute<bf16>(tensor::Arena&, const MicroBatch&,
                                                     const kernels::RopeTable<float>&, SavedTensors<float, bf16>&,
                                                     const float*, float*) const;
template void TransformerBlock<double>::compute<double>(tensor::Arena&, const MicroBatch&,
                                                        const kernels::RopeTable<double>&,
                                                        SavedTensors<double, double>&, const double*, double*) const;

}  // namespace herd::nn
