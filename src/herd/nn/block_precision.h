// The transformer block's precision steps (block.h, block.cpp, block_backward.cpp): how a tensor moves
// between the compute type T (fp32 or fp64: the residual stream, statistics, element-wise kernels,
// GEMM outputs and gradients) and the storage type S (saved tensors and matmul inputs: T, or bf16 in
// bf16 mode).
//
// The block is written once over S and calls these steps where bf16 mode rounds or widens. With
// S = T each one is the identity on pointers: a saved tensor is computed in place (staged), read in
// place (widened), fed to the GEMM as it is (rounded), and the room for the copies (Scratch::t_copy,
// s_copy) is never allocated. So the fp32 and fp64 blocks run exactly the kernels, on exactly the
// buffers, that they ran before bf16 mode existed, and bf16 mode adds only its conversions.
// Internal to nn/.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "herd/core/bf16.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/ops.h"
#include "herd/kernels/rope.h"
#include "herd/nn/batch.h"
#include "herd/nn/layer_sizes.h"
#include "herd/tensor/arena.h"

namespace herd::nn::block_precision {

template <typename T, typename S>
inline constexpr bool kRounds = !std::is_same_v<S, T>;

// The linears, row-major with weights (out, in), inputs at S, outputs and weight gradients at T (bf16:
// gemm_bf16, bf16 inputs with fp32 sums):
//   y (N, out)   = x (N, in) W^T + beta y
//   dW (out, in) += dy^T (out, N) x        (gradients accumulate: beta = 1)
//   dx (N, in)   = dy (N, out) W + beta dx
template <typename T, typename S>
void gemm(const kernels::Ops& ops, kernels::Trans ta, kernels::Trans tb, std::int64_t m, std::int64_t n, std::int64_t k,
          const S* a, std::int64_t lda, const S* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if constexpr (kRounds<T, S>) {
    static_assert(std::is_same_v<T, float> && std::is_same_v<S, bf16>, "bf16 mode is a mode of the fp32 block");
    ops.gemm_bf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  } else {
    ops.gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
  }
}

template <typename T, typename S>
void linear(const kernels::Ops& ops, const S* x, std::int64_t n, std::int64_t in, const S* w, std::int64_t out, T beta,
            T* y) {
  gemm<T, S>(ops, kernels::Trans::kNo, kernels::Trans::kYes, n, out, in, x, in, w, in, beta, y, out);
}

// A linear whose output is a saved tensor and nothing else at T reads it: y (N, out) = x W^T written
// at S. In bf16 mode the GEMM rounds its fp32 sums as it writes (gemm_bf16_rounded: what staging at T
// and store() give, bit for bit, without the fp32 copy and the rounding pass); otherwise linear().
template <typename T, typename S>
void linear_saved(const kernels::Ops& ops, const S* x, std::int64_t n, std::int64_t in, const S* w, std::int64_t out,
                  S* y) {
  if constexpr (kRounds<T, S>) {
    ops.gemm_bf16_rounded(kernels::Trans::kNo, kernels::Trans::kYes, n, out, in, x, in, w, in, y, out);
  } else {
    linear<T, S>(ops, x, n, in, w, out, T(0), y);
  }
}

template <typename T, typename S>
void linear_weight_grad(const kernels::Ops& ops, const S* dy, std::int64_t n, std::int64_t out, const S* x,
                        std::int64_t in, T* dw) {
  gemm<T, S>(ops, kernels::Trans::kYes, kernels::Trans::kNo, out, in, n, dy, out, x, in, T(1), dw, in);
}

template <typename T, typename S>
void linear_input_grad(const kernels::Ops& ops, const S* dy, std::int64_t n, std::int64_t out, const S* w,
                       std::int64_t in, T beta, T* dx) {
  gemm<T, S>(ops, kernels::Trans::kNo, kernels::Trans::kNo, n, in, out, dy, out, w, in, beta, dx, in);
}

// Where a saved tensor is computed at T: the tensor itself, or `buf`, which store() then rounds into it.
template <typename T, typename S>
T* staged(S* saved, T* buf) {
  if constexpr (kRounds<T, S>) {
    return buf;
  } else {
    return saved;
  }
}

// saved (n) = x at S: rounded, copied, or nothing when x was staged in place.
template <typename T, typename S>
void store(const kernels::Ops& ops, const T* x, std::int64_t n, S* saved) {
  if constexpr (kRounds<T, S>) {
    ops.to_bf16(x, n, saved);
  } else if (x != saved) {
    ops.copy(x, saved, sizeof(T) * static_cast<std::size_t>(n));
  }
}

// x (n) at T for a T kernel: x itself, or widened (exactly) into buf.
template <typename T, typename S>
const T* widened(const kernels::Ops& ops, const S* x, std::int64_t n, T* buf) {
  if constexpr (kRounds<T, S>) {
    ops.to_float(x, n, buf);
    return buf;
  } else {
    return x;
  }
}

// x (n) at S for a GEMM: x itself, or rounded into buf.
template <typename T, typename S>
const S* rounded(const kernels::Ops& ops, const T* x, std::int64_t n, S* buf) {
  if constexpr (kRounds<T, S>) {
    ops.to_bf16(x, n, buf);
    return buf;
  } else {
    return x;
  }
}

// RoPE on x (n, heads * D at token stride ld) and its saved copy: rotated in place and stored (S = T: a
// no-op when x is the saved tensor), or rotated and rounded into the bf16 saved tensor in one pass (the
// same bits as rotating in place and then store()).
template <typename T, typename S>
void rope_store(const kernels::Ops& ops, const kernels::RopeTable<T>& rope, const std::int32_t* pos, std::int64_t n,
                std::int64_t heads, T* x, std::int64_t ld, S* saved) {
  if constexpr (kRounds<T, S>) {
    ops.rope_forward(rope, pos, n, heads, x, ld, saved);
  } else {
    ops.rope_forward(rope, pos, n, heads, x, ld);
    store(ops, x, n * ld, saved);
  }
}

// RoPE's inverse rotation of dx at S for the GEMMs: dx itself, rotated in place, or (bf16 mode) rotated
// and rounded into buf in one pass (rounded() after the rotation, bit for bit).
template <typename T, typename S>
const S* rope_backward_rounded(const kernels::Ops& ops, const kernels::RopeTable<T>& rope, const std::int32_t* pos,
                               std::int64_t n, std::int64_t heads, T* dx, std::int64_t ld, S* buf) {
  if constexpr (kRounds<T, S>) {
    ops.rope_backward(rope, pos, n, heads, dx, ld, buf);
    return buf;
  } else {
    ops.rope_backward(rope, pos, n, heads, dx, ld);
    return dx;
  }
}

// The block's scratch, under its "<prefix>scratch" tag. t_copy and s_copy are the room for the other
// precision's copy of a tensor (the `buf` of staged, widened and rounded): null when S = T.
template <typename T, typename S>
class Scratch {
 public:
  Scratch(tensor::Arena& arena, const std::string& prefix) : arena_(arena), tag_(prefix + "scratch") {}
  T* t(std::int64_t count) { return arena_.allocate_array<T>(count, tag_); }
  S* s(std::int64_t count) { return arena_.allocate_array<S>(count, tag_); }
  T* t_copy(std::int64_t count) { return kRounds<T, S> ? t(count) : nullptr; }
  S* s_copy(std::int64_t count) { return kRounds<T, S> ? s(count) : nullptr; }

 private:
  tensor::Arena& arena_;
  std::string tag_;
};

inline kernels::AttentionDims attention_dims(const MicroBatch& mb, const LayerSizes& s) {
  kernels::AttentionDims d;
  d.batch = mb.batch;
  d.tq = mb.seq_len;
  d.tk = mb.seq_len;
  d.q_heads = s.heads;
  d.kv_heads = s.kv_heads;
  d.head_dim = s.head_dim;
  return d;
}

inline kernels::AttentionMask attention_mask(const MicroBatch& mb) {
  return {mb.positions, mb.doc_ids, mb.positions, mb.doc_ids};
}

}  // namespace herd::nn::block_precision
