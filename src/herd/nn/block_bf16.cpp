// TransformerBlock in bf16 mode (block.h): the layer of block.cpp with bf16 weights, bf16 matmul
// inputs and bf16 saved tensors, fp32 everywhere else. docs/precision.md says what is which and why.
//
// Where the rounding happens, and why there:
//   - Each saved tensor is rounded once, when it is made, and every later reader (the forward's next
//     kernel, the backward, a recompute) reads that rounded value, so forward and backward see the same
//     numbers: the norms run on the widened bf16 copy of their input (the copy their backward gets),
//     q, k, v (after RoPE) are rounded in place before attention reads them, and the SwiGLU kernels read
//     the bf16 gate and up and write their product and gradients in bf16 (no fp32 copies of the
//     MLP-width tensors: the backward's scratch stays near the fp32 block's).
//   - The residual stream stays fp32: h = x + o and out = h + down are fp32 sums of the fp32 residual and
//     the fp32 GEMM output; only the copies saved for the norm backward are bf16.
//   - In the backward the output gradient is rounded to bf16 where it enters a GEMM (dy, the SwiGLU and
//     RoPE input gradients), as every matmul input is; the GEMMs write fp32, the element-wise backward
//     kernels run in fp32 and the weight gradients accumulate in fp32 (beta = 1).
// Under full recompute the layer is rebuilt from the bf16 copy of its input, so its residual is the
// rounded input (the forward used the fp32 one): a difference of one bf16 rounding of x, far inside the
// tolerances of docs/precision.md.
// The code mirrors block.cpp step by step (same GEMM conventions, same TP and CP hooks), so that the
// fp32 and fp64 paths there stay exactly what they were.
#include <cstring>
#include <type_traits>

#include "herd/kernels/attention.h"
#include "herd/kernels/convert.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/rmsnorm.h"
#include "herd/kernels/swiglu.h"
#include "herd/nn/block.h"

namespace herd::nn {

using kernels::Trans;

namespace {

// y (N, out) (+)= x (N, in) W^T; dW (out, in) += dy^T x; dx (N, in) (+)= dy W: block.cpp's conventions.
void linear16(const bf16* x, std::int64_t n, std::int64_t in, const bf16* w, std::int64_t out, float beta, float* y) {
  kernels::gemm_bf16(Trans::kNo, Trans::kYes, n, out, in, 1.0f, x, in, w, in, beta, y, out);
}
void weight_grad16(const bf16* dy, std::int64_t n, std::int64_t out, const bf16* x, std::int64_t in, float* dw) {
  kernels::gemm_bf16(Trans::kYes, Trans::kNo, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);
}
void input_grad16(const bf16* dy, std::int64_t n, std::int64_t out, const bf16* w, std::int64_t in, float beta,
                  float* dx) {
  kernels::gemm_bf16(Trans::kNo, Trans::kNo, n, in, out, 1.0f, dy, out, w, in, beta, dx, in);
}

kernels::AttentionDims dims_of(const MicroBatch& mb, const LayerSizes& s) {
  kernels::AttentionDims d;
  d.batch = mb.batch;
  d.tq = mb.seq_len;
  d.tk = mb.seq_len;
  d.q_heads = s.heads;
  d.kv_heads = s.kv_heads;
  d.head_dim = s.head_dim;
  return d;
}

kernels::AttentionMask mask_of(const MicroBatch& mb) { return {mb.positions, mb.doc_ids, mb.positions, mb.doc_ids}; }

}  // namespace

template <typename T>
BlockState<T> TransformerBlock<T>::forward_bf16(tensor::Arena& arena, const MicroBatch& mb,
                                                const kernels::RopeTable<T>& rope, T* x) const {
  if constexpr (!std::is_same_v<T, float>) {
    HERD_CHECK(false, "bf16 mode is a mode of the fp32 block");
    return {};
  } else {
    HERD_CHECK(w16_ != nullptr, "TransformerBlock::forward before bind_bf16()");
    const std::int64_t n = mb.rows(), d = sizes_.hidden, f = sizes_.ffn;
    const std::int64_t nl = tp_ ? tp_->local_rows(n) : n;
    const bool none = recompute_ == model::Recompute::kNone;
    const bool full = recompute_ == model::Recompute::kFull;
    auto keep16 = [&](std::int64_t count, const char* name) {
      return arena.allocate_array<bf16>(count, prefix_ + name);
    };
    auto keep32 = [&](std::int64_t count, const char* name) {
      return arena.allocate_array<float>(count, prefix_ + name);
    };

    // The saved set, in the order of model::layer_saved_tensors, at its dtypes.
    BlockState<float> st;
    st.mark = arena.mark();
    st.input_h = keep16(nl * d, "attn_norm.input");
    if (!full) {
      st.attn_rstd = keep32(nl, "attn_norm.rstd");
      if (none) st.attn_norm_out_h = keep16(nl * d, "attn_norm.output");
      st.q_h = keep16(n * sizes_.q_dim(), "attn.q");
      st.k_h = keep16(n * sizes_.kv_dim(), "attn.k");
      st.v_h = keep16(n * sizes_.kv_dim(), "attn.v");
      st.attn_out_h = keep16(n * sizes_.q_dim(), "attn.out");
      st.lse = keep32(n * sizes_.heads, "attn.lse");
      st.mlp_input_h = keep16(nl * d, "mlp_norm.input");
      st.mlp_rstd = keep32(nl, "mlp_norm.rstd");
      if (none) st.mlp_norm_out_h = keep16(nl * d, "mlp_norm.output");
      st.gate_h = keep16(n * f, "mlp.gate");
      st.up_h = keep16(n * f, "mlp.up");
      if (none) st.act_h = keep16(n * f, "mlp.act");
    }
    const tensor::Arena::Mark scratch = arena.mark();
    kernels::to_bf16(x, nl * d, st.input_h);
    compute_bf16(arena, mb, rope, st, x, x);
    arena.reset(scratch);
    if (full) {
      BlockState<float> kept;
      kept.mark = st.mark;
      kept.input_h = st.input_h;
      st = kept;
    } else if (!none) {
      st.attn_norm_out_h = nullptr;
      st.mlp_norm_out_h = nullptr;
      st.act_h = nullptr;
    }
    return st;
  }
}

template <typename T>
void TransformerBlock<T>::compute_bf16(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope,
                                       BlockState<T>& st, const T* residual, T* x_out) const {
  if constexpr (!std::is_same_v<T, float>) {
    HERD_CHECK(false, "bf16 mode is a mode of the fp32 block");
  } else {
    const std::int64_t n = mb.rows(), d = sizes_.hidden, f = sizes_.ffn;
    const std::int64_t qd = sizes_.q_dim(), kvd = sizes_.kv_dim();
    const std::int64_t nl = tp_ ? tp_->local_rows(n) : n;
    auto f32 = [&](std::int64_t count) { return arena.allocate_array<float>(count, prefix_ + "scratch"); };
    auto need16 = [&](bf16*& p, std::int64_t count) {
      if (!p) p = arena.allocate_array<bf16>(count, prefix_ + "scratch");
    };
    auto need32 = [&](float*& p, std::int64_t count) {
      if (!p) p = f32(count);
    };
    // Into a column-parallel linear: the bf16 norm output of all N rows.
    auto gathered = [&](const bf16* local) -> const bf16* {
      if (!tp_) return local;
      bf16* all = arena.allocate_array<bf16>(n * d, prefix_ + "scratch");
      tp_->gather(local, all, n, d);
      return all;
    };
    // out (n_loc, d) = res + (a W^T) summed over TP ranks, in fp32.
    auto row_parallel = [&](const bf16* a, std::int64_t in, const bf16* w, const float* res, float* out) {
      if (!tp_) {
        std::memcpy(out, res, sizeof(float) * static_cast<std::size_t>(n * d));
        linear16(a, n, in, w, d, 1.0f, out);
        return;
      }
      float* partial = f32(n * d);
      linear16(a, n, in, w, d, 0.0f, partial);
      tp_->reduce(partial, out, n, d);
      for (std::int64_t i = 0; i < nl * d; ++i) out[i] += res[i];
    };
    need32(st.attn_rstd, nl);
    need16(st.attn_norm_out_h, nl * d);
    need16(st.q_h, n * qd);
    need16(st.k_h, n * kvd);
    need16(st.v_h, n * kvd);
    need16(st.attn_out_h, n * qd);
    need32(st.lse, n * sizes_.heads);
    need16(st.mlp_input_h, nl * d);
    need32(st.mlp_rstd, nl);
    need16(st.mlp_norm_out_h, nl * d);
    need16(st.gate_h, n * f);
    need16(st.up_h, n * f);
    need16(st.act_h, n * f);
    const LayerLayout& L = layout_;

    float* wn = f32(2 * d);  // the two norm weights, widened
    kernels::to_float(w16_ + L.attn_norm, d, wn);
    kernels::to_float(w16_ + L.mlp_norm, d, wn + d);
    float* xin = f32(nl * d);  // the norm's input as its backward will see it
    kernels::to_float(st.input_h, nl * d, xin);
    float* normed = f32(nl * d);
    kernels::rmsnorm_forward<float>(xin, d, wn, nl, d, sizes_.norm_eps, normed, d, st.attn_rstd);
    kernels::to_bf16(normed, nl * d, st.attn_norm_out_h);
    const bf16* attn_in = gathered(st.attn_norm_out_h);  // (N, d)
    float* q = f32(n * qd);
    float* k = f32(n * kvd);
    float* v = f32(n * kvd);
    linear16(attn_in, n, d, w16_ + L.wq, qd, 0.0f, q);
    linear16(attn_in, n, d, w16_ + L.wk, kvd, 0.0f, k);
    linear16(attn_in, n, d, w16_ + L.wv, kvd, 0.0f, v);
    kernels::rope_forward<float>(rope, mb.positions, n, sizes_.heads, q, qd);
    kernels::rope_forward<float>(rope, mb.positions, n, sizes_.kv_heads, k, kvd);
    kernels::round_to_bf16(q, n * qd, st.q_h);
    kernels::round_to_bf16(k, n * kvd, st.k_h);
    kernels::round_to_bf16(v, n * kvd, st.v_h);
    float* ao = f32(n * qd);
    if (attn_) {
      attn_->forward(dims_of(mb, sizes_), q, k, v, ao, st.lse);
    } else {
      kernels::attention_forward<float>(dims_of(mb, sizes_), mask_of(mb), q, k, v, ao, st.lse);
    }
    kernels::to_bf16(ao, n * qd, st.attn_out_h);

    // h = residual + attn_out Wo^T in fp32; its bf16 copy is the MLP norm's saved input.
    float* h = f32(nl * d);
    row_parallel(st.attn_out_h, qd, w16_ + L.wo, residual ? residual : xin, h);
    kernels::to_bf16(h, nl * d, st.mlp_input_h);
    kernels::to_float(st.mlp_input_h, nl * d, xin);  // reused: the MLP norm's input, rounded
    kernels::rmsnorm_forward<float>(xin, d, wn + d, nl, d, sizes_.norm_eps, normed, d, st.mlp_rstd);
    kernels::to_bf16(normed, nl * d, st.mlp_norm_out_h);
    const bf16* mlp_in = gathered(st.mlp_norm_out_h);  // (N, d)
    float* gate = f32(n * f);
    float* up = f32(n * f);
    linear16(mlp_in, n, d, w16_ + L.w_gate, f, 0.0f, gate);
    linear16(mlp_in, n, d, w16_ + L.w_up, f, 0.0f, up);
    kernels::to_bf16(gate, n * f, st.gate_h);
    kernels::to_bf16(up, n * f, st.up_h);
    kernels::swiglu_forward(st.gate_h, f, st.up_h, f, n, f, st.act_h, f);
    if (x_out) row_parallel(st.act_h, f, w16_ + L.w_down, h, x_out);
  }
}

template <typename T>
void TransformerBlock<T>::backward_bf16(tensor::Arena& arena, const MicroBatch& mb, const kernels::RopeTable<T>& rope,
                                        BlockState<T>& st, T* dx) const {
  if constexpr (!std::is_same_v<T, float>) {
    HERD_CHECK(false, "bf16 mode is a mode of the fp32 block");
  } else {
    HERD_CHECK(g_ != nullptr && w16_ != nullptr && st.input_h != nullptr,
               "TransformerBlock::backward without bind_bf16() or forward state");
    const std::int64_t n = mb.rows(), d = sizes_.hidden, f = sizes_.ffn;
    const std::int64_t qd = sizes_.q_dim(), kvd = sizes_.kv_dim();
    const std::int64_t nl = tp_ ? tp_->local_rows(n) : n;
    const LayerLayout& L = layout_;
    auto f32 = [&](std::int64_t count) { return arena.allocate_array<float>(count, prefix_ + "scratch"); };
    auto b16 = [&](std::int64_t count) { return arena.allocate_array<bf16>(count, prefix_ + "scratch"); };
    auto widened = [&](const bf16* x, std::int64_t count) {
      float* w = f32(count);
      kernels::to_float(x, count, w);
      return w;
    };
    // dLoss/d(output) rounded for the GEMMs, gathered to all N rows under TP (the adjoint of the
    // row-parallel linear's reduce), and the reduce of a column-parallel input's partial gradient.
    bf16* dx16 = b16(nl * d);
    bf16* full16 = tp_ ? b16(n * d) : nullptr;
    auto rounded_dy = [&]() -> const bf16* {
      kernels::to_bf16(dx, nl * d, dx16);
      if (!tp_) return dx16;
      tp_->gather(dx16, full16, n, d);
      return full16;
    };
    bf16* all16 = tp_ ? b16(n * d) : nullptr;
    auto gathered = [&](const bf16* local) -> const bf16* {
      if (!tp_) return local;
      tp_->gather(local, all16, n, d);
      return all16;
    };
    float* d_norm_local = tp_ ? f32(nl * d) : nullptr;
    auto reduced = [&](const float* partial) -> const float* {
      if (!tp_) return partial;
      tp_->reduce(partial, d_norm_local, n, d);
      return d_norm_local;
    };
    float* wn = f32(2 * d);
    kernels::to_float(w16_ + L.attn_norm, d, wn);
    kernels::to_float(w16_ + L.mlp_norm, d, wn + d);

    if (recompute_ == model::Recompute::kFull) {
      compute_bf16(arena, mb, rope, st, nullptr, nullptr);
    } else if (recompute_ == model::Recompute::kSelective) {
      // Element-wise only, from the saved bf16 tensors: the norm outputs and the SwiGLU product.
      float* rstd = f32(nl);
      float* xin = widened(st.input_h, nl * d);
      float* normed = f32(nl * d);
      kernels::rmsnorm_forward<float>(xin, d, wn, nl, d, sizes_.norm_eps, normed, d, rstd);
      st.attn_norm_out_h = b16(nl * d);
      kernels::to_bf16(normed, nl * d, st.attn_norm_out_h);
      kernels::to_float(st.mlp_input_h, nl * d, xin);
      kernels::rmsnorm_forward<float>(xin, d, wn + d, nl, d, sizes_.norm_eps, normed, d, rstd);
      st.mlp_norm_out_h = b16(nl * d);
      kernels::to_bf16(normed, nl * d, st.mlp_norm_out_h);
      st.act_h = b16(n * f);
      kernels::swiglu_forward(st.gate_h, f, st.up_h, f, n, f, st.act_h, f);
    }

    // MLP: out = h + act Wdown^T. Its temporaries go before the attention's.
    const tensor::Arena::Mark mlp_mark = arena.mark();
    const bf16* dy = rounded_dy();  // (N, d)
    float* d_act = f32(n * f);
    input_grad16(dy, n, d, w16_ + L.w_down, f, 0.0f, d_act);
    weight_grad16(dy, n, d, st.act_h, f, g_ + L.w_down);
    bf16* d_gu16 = b16(n * 2 * f);  // (N, 2f): [dgate | dup] per row, matching the adjacent gate/up weights
    kernels::swiglu_backward(d_act, f, st.gate_h, f, st.up_h, f, n, f, d_gu16, 2 * f, d_gu16 + f, 2 * f);
    weight_grad16(d_gu16, n, 2 * f, gathered(st.mlp_norm_out_h), d, g_ + L.w_gate);
    float* d_norm = f32(n * d);  // (N, d), partial over TP
    input_grad16(d_gu16, n, 2 * f, w16_ + L.w_gate, d, 0.0f, d_norm);
    float* hin = widened(st.mlp_input_h, nl * d);
    kernels::rmsnorm_backward<float>(reduced(d_norm), d, hin, d, wn + d, st.mlp_rstd, nl, d, dx, d,
                                     kernels::Accumulate::kAdd, g_ + L.mlp_norm);
    arena.reset(mlp_mark);

    // Attention: h = input + attn_out Wo^T.
    dy = rounded_dy();
    float* d_ao = f32(n * qd);
    input_grad16(dy, n, d, w16_ + L.wo, qd, 0.0f, d_ao);
    weight_grad16(dy, n, d, st.attn_out_h, qd, g_ + L.wo);
    const float* q = widened(st.q_h, n * qd);
    const float* k = widened(st.k_h, n * kvd);
    const float* v = widened(st.v_h, n * kvd);
    const float* ao = widened(st.attn_out_h, n * qd);
    float* dq = f32(n * qd);
    float* dk = f32(n * kvd);
    float* dv = f32(n * kvd);
    if (attn_) {
      attn_->backward(dims_of(mb, sizes_), q, k, v, ao, st.lse, d_ao, dq, dk, dv);
    } else {
      kernels::attention_backward<float>(dims_of(mb, sizes_), mask_of(mb), q, k, v, ao, st.lse, d_ao, dq, dk, dv);
    }
    kernels::rope_backward<float>(rope, mb.positions, n, sizes_.heads, dq, qd);
    kernels::rope_backward<float>(rope, mb.positions, n, sizes_.kv_heads, dk, kvd);
    bf16* dq16 = b16(n * qd);
    bf16* dk16 = b16(n * kvd);
    bf16* dv16 = b16(n * kvd);
    kernels::to_bf16(dq, n * qd, dq16);
    kernels::to_bf16(dk, n * kvd, dk16);
    kernels::to_bf16(dv, n * kvd, dv16);
    const bf16* attn_in = gathered(st.attn_norm_out_h);
    weight_grad16(dq16, n, qd, attn_in, d, g_ + L.wq);
    weight_grad16(dk16, n, kvd, attn_in, d, g_ + L.wk);
    weight_grad16(dv16, n, kvd, attn_in, d, g_ + L.wv);
    float* d_norm2 = f32(n * d);
    input_grad16(dq16, n, qd, w16_ + L.wq, d, 0.0f, d_norm2);
    input_grad16(dk16, n, kvd, w16_ + L.wk, d, 1.0f, d_norm2);
    input_grad16(dv16, n, kvd, w16_ + L.wv, d, 1.0f, d_norm2);
    float* xin = widened(st.input_h, nl * d);
    kernels::rmsnorm_backward<float>(reduced(d_norm2), d, xin, d, wn, st.attn_rstd, nl, d, dx, d,
                                     kernels::Accumulate::kAdd, g_ + L.attn_norm);

    arena.reset(st.mark);
    st = BlockState<float>{};
  }
}

#define HERD_BLOCK_BF16(T)                                                                                          \
  template BlockState<T> TransformerBlock<T>::forward_bf16(tensor::Arena&, const MicroBatch&,                       \
                                                           const kernels::RopeTable<T>&, T*) const;                 \
  template void TransformerBlock<T>::compute_bf16(tensor::Arena&, const MicroBatch&, const kernels::RopeTable<T>&,  \
                                                  BlockState<T>&, const T*, T*) const;                              \
  template void TransformerBlock<T>::backward_bf16(tensor::Arena&, const MicroBatch&, const kernels::RopeTable<T>&, \
                                                   BlockState<T>&, T*) const;
HERD_BLOCK_BF16(float)
HERD_BLOCK_BF16(double)
#undef HERD_BLOCK_BF16

}  // namespace herd::nn
