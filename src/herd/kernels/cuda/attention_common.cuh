// What the CUDA-core attention kernels (attention.cu) and the tensor-core ones (attention_mma.cu) share:
// the resolved call parameters, the staging of a tile's positions / document ids / row statistics, the
// per-tile visibility span used to skip tiles no pair can see, and the element-wise mask. Internal to
// kernels/cuda/ (device code); the contracts are kernels/attention.h's.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include "herd/core/check.h"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda::attn {

constexpr int kMaxHeadDim = 128;

struct Params {
  std::int64_t tq, tk;
  int q_heads, kv_heads, group, d;
  std::int64_t ld_q, ld_k, ld_v, ld_o;  // resolved token strides (never 0)
  const std::int32_t* pos_q;
  const std::int32_t* doc_q;
  const std::int32_t* pos_k;
  const std::int32_t* doc_k;
  float scale;
};

inline Params params_of(const AttentionDims& d, const AttentionMask& m) {
  HERD_CHECK(d.batch >= 1 && d.tq >= 0 && d.tk >= 0 && d.head_dim >= 1, "attention dims");
  HERD_CHECK(d.kv_heads >= 1 && d.q_heads % d.kv_heads == 0, "q_heads (", d.q_heads,
             ") must be a multiple of kv_heads (", d.kv_heads, ")");
  HERD_CHECK(d.head_dim <= kMaxHeadDim, "cuda attention supports head_dim up to ", kMaxHeadDim, ", not ", d.head_dim);
  HERD_CHECK(d.batch <= 65535 && d.q_heads <= 65535, "cuda attention grid: batch and heads at most 65535");
  HERD_CHECK(m.pos_q && m.pos_k, "attention needs query and key positions");
  const std::int64_t qd = d.q_heads * d.head_dim, kd = d.kv_heads * d.head_dim;
  Params p{};
  p.tq = d.tq;
  p.tk = d.tk;
  p.q_heads = static_cast<int>(d.q_heads);
  p.kv_heads = static_cast<int>(d.kv_heads);
  p.group = static_cast<int>(d.q_heads / d.kv_heads);
  p.d = static_cast<int>(d.head_dim);
  p.ld_q = d.ld_q ? d.ld_q : qd;
  p.ld_k = d.ld_k ? d.ld_k : kd;
  p.ld_v = d.ld_v ? d.ld_v : kd;
  p.ld_o = d.ld_o ? d.ld_o : qd;
  HERD_CHECK(p.ld_q >= qd && p.ld_o >= qd && p.ld_k >= kd && p.ld_v >= kd,
             "attention token strides smaller than a token");
  p.pos_q = m.pos_q;
  p.doc_q = m.doc_q;
  p.pos_k = m.pos_k;
  p.doc_k = m.doc_k;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  return p;
}

// Positions and document ids of `n` valid tokens of a tile (the rest left as they are: masked by count).
__device__ __forceinline__ void stage_mask(int* pos_s, int* doc_s, const std::int32_t* pos, const std::int32_t* doc,
                                           int n, int tile) {
  const int t = threadIdx.x;
  if (t < tile) {
    pos_s[t] = t < n ? pos[t] : 0;
    doc_s[t] = t < n && doc ? doc[t] : 0;
  }
}

// The min/max position and document id of the first n tokens staged by stage_mask (after a barrier),
// into span[0..3] = {pos_min, pos_max, doc_min, doc_max}. Ends with a barrier.
__device__ __forceinline__ void tile_span(const int* pos_s, const int* doc_s, int n, int* span) {
  if (threadIdx.x == 0) {
    span[0] = 0x7fffffff;
    span[1] = -0x7fffffff - 1;
    span[2] = 0x7fffffff;
    span[3] = -0x7fffffff - 1;
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < n) {
    atomicMin(&span[0], pos_s[t]);
    atomicMax(&span[1], pos_s[t]);
    atomicMin(&span[2], doc_s[t]);
    atomicMax(&span[3], doc_s[t]);
  }
  __syncthreads();
}

// Stages lse and delta of `n` valid query rows of one head (the rest -inf and 0: masked anyway).
__device__ __forceinline__ void stage_row_stats(float* lse_s, float* delta_s, const float* lse, const float* delta,
                                                int n, int tile) {
  const int t = threadIdx.x;
  if (t < tile) {
    lse_s[t] = t < n ? lse[t] : -INFINITY;
    delta_s[t] = t < n ? delta[t] : 0.0f;
  }
}

// Query row r of the tile sees key column kc (both tiles staged by stage_mask).
__device__ __forceinline__ bool visible(int r, int kc, int qn, int kn, const int* pq, const int* dq, const int* pk,
                                        const int* dk) {
  return r < qn && kc < kn && pk[kc] <= pq[r] && dk[kc] == dq[r];
}

// Dynamic shared memory above 48 KiB needs the per-kernel opt-in.
template <typename Kernel>
void allow_smem(Kernel kernel, std::size_t bytes) {
  HERD_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

inline unsigned tiles_of(std::int64_t n, int tile) { return static_cast<unsigned>((n + tile - 1) / tile); }

// The tensor-core kernels' dispatch on the head dim: calls fn.template operator()<NF>() with NF = D / 16
// (D a multiple of 16 in [16, 128]; NF 16-wide fragments span a head).
template <typename Fn>
void with_nf(int d, Fn&& fn) {
  switch (d / 16) {
    case 1: fn.template operator()<1>(); break;
    case 2: fn.template operator()<2>(); break;
    case 3: fn.template operator()<3>(); break;
    case 4: fn.template operator()<4>(); break;
    case 5: fn.template operator()<5>(); break;
    case 6: fn.template operator()<6>(); break;
    case 7: fn.template operator()<7>(); break;
    default: fn.template operator()<8>(); break;
  }
}

// `rows` rows of D bf16 values (global token stride ld) into shared rows of stride ldd; rows at or past
// `valid` are zero. 16-byte copies when the source allows them (D is a multiple of 16, so a row is
// whole 16-byte chunks). Used by the tensor-core kernels (attention_mma.cu).
template <int kThreads, int kRows>
__device__ __forceinline__ void stage_bf16(__nv_bfloat16* dst, int ldd, const __nv_bfloat16* src, std::int64_t ld,
                                           int valid, int d) {
  const int chunks = d / 8;
  const bool vec = ((reinterpret_cast<std::uintptr_t>(src) | static_cast<std::uintptr_t>(ld * 2)) & 15) == 0;
  for (int idx = threadIdx.x; idx < kRows * chunks; idx += kThreads) {
    const int r = idx / chunks, c = (idx - r * chunks) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < valid) {
      const __nv_bfloat16* s = src + r * ld + c;
      if (vec) {
        val = *reinterpret_cast<const uint4*>(s);
      } else {
        alignas(16) __nv_bfloat16 tmp[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) tmp[e] = s[e];
        val = *reinterpret_cast<const uint4*>(tmp);
      }
    }
    *reinterpret_cast<uint4*>(dst + r * ldd + c) = val;
  }
}

// `rows` rows of D fp32 dO values rounded to bf16 (round to nearest even) into shared rows of stride
// ldd; rows at or past `valid` are zero. D is a multiple of 16 and ldd even (the tensor-core kernels'
// tiles): 16-byte loads when the source allows them, each four values stored as two bf16 pairs.
template <int kThreads, int kRows>
__device__ __forceinline__ void stage_dout(__nv_bfloat16* dst, int ldd, const float* src, std::int64_t ld, int valid,
                                           int d) {
  const bool vec = ((reinterpret_cast<std::uintptr_t>(src) | static_cast<std::uintptr_t>(ld * 4)) & 15) == 0;
  if (vec) {
    const int chunks = d / 4;
    for (int idx = threadIdx.x; idx < kRows * chunks; idx += kThreads) {
      const int r = idx / chunks, c = (idx - r * chunks) * 4;
      const float4 x = r < valid ? *reinterpret_cast<const float4*>(src + r * ld + c) : make_float4(0, 0, 0, 0);
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(dst + r * ldd + c);  // 4-byte aligned: c, ldd even
      out[0] = __floats2bfloat162_rn(x.x, x.y);                                    // .x (the lower address) = x.x
      out[1] = __floats2bfloat162_rn(x.z, x.w);
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kRows * d; idx += kThreads) {
    const int r = idx / d, c = idx - r * d;
    dst[r * ldd + c] = narrow_bf16(r < valid ? src[r * ld + c] : 0.0f);
  }
}

// The tensor-core kernels take a bf16 call when the selection (kernels.h) names them and the head
// dimension is a multiple of 16 up to 128; every other call runs attention.cu's kernels.
inline bool tensor_cores_apply(const Params& p) {
  return attention_kernels() != AttentionKernels::kCudaCores && p.d % 16 == 0 && p.d <= 128;
}
// Calls the hook set by set_attention_part_hook (kernels.h), if any (attention.cu).
void mark_part(AttentionPart part);
// attention_mma.cu (inline-PTX mma.sync, register-resident accumulators).
void forward_mma(const Params& p, std::int64_t batch, const __nv_bfloat16* q, const __nv_bfloat16* k,
                 const __nv_bfloat16* v, __nv_bfloat16* out, float* lse);
void backward_mma(const Params& p, std::int64_t batch, const __nv_bfloat16* q, const __nv_bfloat16* k,
                  const __nv_bfloat16* v, const __nv_bfloat16* out, const float* lse, const float* dout, float* dq,
                  float* dk, float* dv);

}  // namespace herd::kernels::cuda::attn
