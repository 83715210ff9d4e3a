// Flash-style causal grouped-query attention with the document mask on the GPU (contracts and layout:
// kernels/attention.h; the CPU reference: kernels/cpu/attention.cpp). Key j is visible to query i iff
// doc_k[j] == doc_q[i] and pos_k[j] <= pos_q[i] (null doc arrays: one document); a query that sees no
// key gets out = 0 and lse = -inf. Scores use scale = 1/sqrt(D); softmax, statistics and every sum are
// fp32 (bf16 inputs are widened when staged into shared memory, bf16 outputs rounded to nearest even).
// bf16 calls with head_dim a multiple of 16 go to the tensor-core kernels of attention_mma.cu (mma.sync)
// instead unless set_attention_kernels names kCudaCores (kernels.h); Params and the mask helpers:
// attention_common.cuh. This file also holds the kernel selection and the part hook (kernels.h).
//
// Kernels (256 threads = a 16 x 16 grid (ty, tx) per block; kTileQ = kTileK = 64):
//   forward      grid (ceil(Tq/64), Hq, B): one block per (batch, query head, query tile). Streams the
//                key tiles with an online softmax; the running max / sum of each query row live in
//                registers of the 16 threads (one half-warp) that hold the row's scores, so the row
//                reductions are half-warp shuffles. Writes out and lse (B, Hq, Tq).
//   delta        one warp per (token, query head): delta = rowsum(dout * out) into a (B, Hq, Tq) fp32
//                scratch from the caching allocator.
//   backward dkdv grid (ceil(Tk/64), Hkv, B): one block per (batch, KV head, key tile); loops over the
//                Hq/Hkv query heads of the group and their query tiles, recomputes P = exp(s*scale - lse)
//                and dS = P (dP - delta) scale tile by tile (FlashAttention-2) and accumulates dK, dV
//                in registers; writes them (overwrite) once, so no atomics.
//   backward dq  grid (ceil(Tq/64), Hq, B): one block per (batch, query head, query tile); recomputes P
//                and dS over the key tiles and accumulates dQ = dS K in registers; writes dq
//                (overwrite). A separate pass instead of FlashAttention-2's atomicAdd into dq: it costs
//                the score recompute twice, but dq is deterministic and strided dq needs no zeroing.
// Thread mapping: a score tile (64 x 64) gives thread (ty, tx) rows ty + 16 i and columns tx + 16 j
// (i, j < 4); an output tile (64 x D) gives it rows ty + 16 i and columns tx + 16 j (j < NJ =
// ceil(D / 16) rounded up to 1, 2, 4 or 8, so D <= 128).
// Shared memory (dynamic, fp32; rows padded to D + 1 floats so the 16 distinct rows a half-warp reads
// fall in distinct banks): forward Q, K, V tiles and P (64 x 65): (3 * 64 * (D + 1) + 64 * 65) * 4 bytes,
// 116 KiB at D = 128; dkdv K, V, Q, dO tiles and P, dS: 165 KiB at D = 128; dq Q, dO, K, V and dS:
// 149 KiB at D = 128 (sm_90 allows 227 KiB per block). Plus the tiles' positions and document ids.
// Masking: a key tile (forward, dq) or query tile (dkdv) that no pair can see is skipped, decided per
// block from the position / document-id range of the fixed tile (__syncthreads_or); other tiles apply
// the element-wise mask.
#include <atomic>
#include <cmath>
#include <cstdint>

#include "herd/core/check.h"
#include "herd/kernels/cuda/attention_common.cuh"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda {
namespace {

using attn::allow_smem;
using attn::Params;
using attn::params_of;
using attn::stage_mask;
using attn::tile_span;
using attn::tiles_of;
using attn::visible;

constexpr int kThreads = 256;
constexpr int kBQ = 64;  // query rows per tile
constexpr int kBK = 64;  // keys per tile
constexpr int kRI = kBQ / 16;
constexpr int kCJ = kBK / 16;
constexpr int kLdP = kBK + 1;  // row stride of the P / dS tiles in shared memory
constexpr unsigned kFull = 0xffffffffu;

// rows x D values from global rows (token stride ld) into shared rows of stride D + 1, times `mul`;
// rows at or past `valid` are zero (never read from global memory).
template <typename T>
__device__ __forceinline__ void stage_rows(float* dst, const T* src, std::int64_t ld, int valid, int rows, int d,
                                           float mul) {
  const int ls = d + 1;
  for (int idx = threadIdx.x; idx < rows * d; idx += kThreads) {
    const int r = idx / d, c = idx - r * d;
    dst[r * ls + c] = r < valid ? widen(src[r * ld + c]) * mul : 0.0f;
  }
}

__device__ __forceinline__ float half_warp_max(float v) {
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// s[i][j] (+)= a_rows(ty + 16 i) . b_rows(tx + 16 j) over D, both tiles in shared memory (stride D + 1).
__device__ __forceinline__ void score_tile(const float* a, const float* b, int d, int ty, int tx,
                                           float (&s)[kRI][kCJ]) {
  const int ls = d + 1;
#pragma unroll
  for (int i = 0; i < kRI; ++i)
#pragma unroll
    for (int j = 0; j < kCJ; ++j) s[i][j] = 0.0f;
  for (int c = 0; c < d; ++c) {
    float av[kRI], bv[kCJ];
#pragma unroll
    for (int i = 0; i < kRI; ++i) av[i] = a[(ty + 16 * i) * ls + c];
#pragma unroll
    for (int j = 0; j < kCJ; ++j) bv[j] = b[(tx + 16 * j) * ls + c];
#pragma unroll
    for (int i = 0; i < kRI; ++i)
#pragma unroll
      for (int j = 0; j < kCJ; ++j) s[i][j] = fmaf(av[i], bv[j], s[i][j]);
  }
}

// acc[i][jj] += sum_r p[rows(r)][ty + 16 i or r] ... : the two output-tile products.
// acc(row ty+16i, col tx+16jj) += sum_kk p[(ty + 16 i) * kLdP + kk] * m[kk * (D+1) + col]   (P V, dS K)
template <int NJ>
__device__ __forceinline__ void accumulate_pm(const float* p, const float* m, int d, int ty, int tx,
                                              float (&acc)[kRI][NJ]) {
  const int ls = d + 1;
  for (int kk = 0; kk < kBK; ++kk) {
    float pv[kRI], mv[NJ];
#pragma unroll
    for (int i = 0; i < kRI; ++i) pv[i] = p[(ty + 16 * i) * kLdP + kk];
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) {
      const int col = tx + 16 * jj;
      mv[jj] = col < d ? m[kk * ls + col] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kRI; ++i)
#pragma unroll
      for (int jj = 0; jj < NJ; ++jj) acc[i][jj] = fmaf(pv[i], mv[jj], acc[i][jj]);
  }
}

// acc(key ty+16i, col tx+16jj) += sum_r p[r * kLdP + ty + 16 i] * m[r * (D+1) + col]   (P^T dO, dS^T Q)
template <int NJ>
__device__ __forceinline__ void accumulate_ptm(const float* p, const float* m, int d, int ty, int tx,
                                               float (&acc)[kBK / 16][NJ]) {
  const int ls = d + 1;
  for (int r = 0; r < kBQ; ++r) {
    float pv[kBK / 16], mv[NJ];
#pragma unroll
    for (int i = 0; i < kBK / 16; ++i) pv[i] = p[r * kLdP + ty + 16 * i];
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) {
      const int col = tx + 16 * jj;
      mv[jj] = col < d ? m[r * ls + col] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kBK / 16; ++i)
#pragma unroll
      for (int jj = 0; jj < NJ; ++jj) acc[i][jj] = fmaf(pv[i], mv[jj], acc[i][jj]);
  }
}

__device__ __forceinline__ void store_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_out(__nv_bfloat16* p, float v) { *p = narrow_bf16(v); }

template <typename T, int NJ>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Params p, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   T* __restrict__ out, float* __restrict__ lse) {
  extern __shared__ float smem[];
  __shared__ int pq_s[kBQ], dq_s[kBQ], pk_s[kBK], dk_s[kBK], span[4];
  const int d = p.d, ls = d + 1;
  float* qs = smem;
  float* ks = qs + kBQ * ls;
  float* vs = ks + kBK * ls;
  float* ps = vs + kBK * ls;
  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.x) * kBQ;
  const int qn = static_cast<int>(p.tq - q0 < kBQ ? p.tq - q0 : kBQ);
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;

  stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kBQ);
  stage_rows(qs, q + (b * p.tq + q0) * p.ld_q + static_cast<std::int64_t>(h) * d, p.ld_q, qn, kBQ, d, p.scale);
  __syncthreads();
  tile_span(pq_s, dq_s, qn, span);
  const int q_pos_max = span[1], q_doc_min = span[2], q_doc_max = span[3];

  float acc[kRI][NJ];
  float row_m[kRI], row_l[kRI];
#pragma unroll
  for (int i = 0; i < kRI; ++i) {
    row_m[i] = -INFINITY;
    row_l[i] = 0.0f;
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) acc[i][jj] = 0.0f;
  }

  for (std::int64_t k0 = 0; k0 < p.tk; k0 += kBK) {
    const int kn = static_cast<int>(p.tk - k0 < kBK ? p.tk - k0 : kBK);
    __syncthreads();  // the previous tile's K, V, P and mask are no longer read
    stage_mask(pk_s, dk_s, p.pos_k + b * p.tk + k0, p.doc_k ? p.doc_k + b * p.tk + k0 : nullptr, kn, kBK);
    __syncthreads();
    const int t = threadIdx.x;
    const bool maybe = t < kn && pk_s[t] <= q_pos_max && dk_s[t] >= q_doc_min && dk_s[t] <= q_doc_max;
    if (!__syncthreads_or(maybe)) continue;  // no pair of this tile is visible (uniform across the block)
    const std::int64_t kv_off = static_cast<std::int64_t>(hk) * d;
    stage_rows(ks, k + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, kn, kBK, d, 1.0f);
    stage_rows(vs, v + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, kn, kBK, d, 1.0f);
    __syncthreads();

    float s[kRI][kCJ];
    score_tile(qs, ks, d, ty, tx, s);  // (q * scale) . k, as the CPU forward
#pragma unroll
    for (int i = 0; i < kRI; ++i) {
      const int r = ty + 16 * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kCJ; ++j) {
        if (!visible(r, tx + 16 * j, qn, kn, pq_s, dq_s, pk_s, dk_s)) s[i][j] = -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      mx = half_warp_max(mx);
      const float mnew = fmaxf(row_m[i], mx);
      const float alpha = row_m[i] == -INFINITY ? 0.0f : expf(row_m[i] - mnew);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kCJ; ++j) {
        const float pij = s[i][j] == -INFINITY ? 0.0f : expf(s[i][j] - mnew);
        sum += pij;
        ps[r * kLdP + tx + 16 * j] = pij;
      }
      sum = half_warp_sum(sum);
      row_l[i] = row_l[i] * alpha + sum;
      row_m[i] = mnew;
#pragma unroll
      for (int jj = 0; jj < NJ; ++jj) acc[i][jj] *= alpha;
    }
    __syncthreads();
    accumulate_pm<NJ>(ps, vs, d, ty, tx, acc);  // acc += P V
  }

#pragma unroll
  for (int i = 0; i < kRI; ++i) {
    const int r = ty + 16 * i;
    if (r >= qn) continue;
    const float l = row_l[i];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* o = out + (b * p.tq + q0 + r) * p.ld_o + static_cast<std::int64_t>(h) * d;
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) {
      const int col = tx + 16 * jj;
      if (col < d) store_out(o + col, acc[i][jj] * inv);
    }
    if (tx == 0)
      lse[(static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq + q0 + r] = l > 0.0f ? row_m[i] + logf(l) : -INFINITY;
  }
}

// delta[(b, h, i)] = sum_c out[b, i, h, c] * dout[b, i, h, c]: one warp per (token, head).
template <typename T>
__global__ void __launch_bounds__(kThreads) delta_kernel(Params p, std::int64_t rows, const T* __restrict__ out,
                                                         const float* __restrict__ dout, float* __restrict__ delta) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (kThreads / 32);
  const int lane = threadIdx.x & 31;
  for (std::int64_t w = blockIdx.x * static_cast<std::int64_t>(kThreads / 32) + (threadIdx.x >> 5); w < rows;
       w += warps) {
    const std::int64_t token = w / p.q_heads;
    const int h = static_cast<int>(w - token * p.q_heads);
    const std::int64_t off = token * p.ld_o + static_cast<std::int64_t>(h) * p.d;
    float sum = 0.0f;
    for (int c = lane; c < p.d; c += 32) sum = fmaf(widen(out[off + c]), dout[off + c], sum);
    sum = warp_sum(sum);
    const std::int64_t b = token / p.tq, i = token - b * p.tq;
    if (lane == 0) delta[(b * p.q_heads + h) * p.tq + i] = sum;
  }
}

// The score and dP tiles of one (query tile, key tile) pair turned into P and dS (dS carries the
// scale): s = q . k (unscaled, as the CPU backward), p = exp(s * scale - lse) where visible and the row
// saw a key, ds = p (dp - delta) scale. Writes P to ps (when not null) and dS to dss.
__device__ __forceinline__ void p_and_ds(const float* qs, const float* ks, const float* dos, const float* vs,
                                         const float* lse_s, const float* delta_s, int d, float scale, int qn, int kn,
                                         const int* pq, const int* dq, const int* pk, const int* dk, int ty, int tx,
                                         float* ps, float* dss) {
  float s[kRI][kCJ], dp[kRI][kCJ];
  score_tile(qs, ks, d, ty, tx, s);
  score_tile(dos, vs, d, ty, tx, dp);
#pragma unroll
  for (int i = 0; i < kRI; ++i) {
    const int r = ty + 16 * i;
    const float li = lse_s[r], di = delta_s[r];
#pragma unroll
    for (int j = 0; j < kCJ; ++j) {
      const int kc = tx + 16 * j;
      const bool vis = li != -INFINITY && visible(r, kc, qn, kn, pq, dq, pk, dk);
      const float pij = vis ? expf(s[i][j] * scale - li) : 0.0f;
      if (ps) ps[r * kLdP + kc] = pij;
      dss[r * kLdP + kc] = pij * (dp[i][j] - di) * scale;
    }
  }
}

template <typename T, int NJ>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(Params p, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                const float* __restrict__ lse, const float* __restrict__ delta, const float* __restrict__ dout,
                float* __restrict__ dk, float* __restrict__ dv) {
  extern __shared__ float smem[];
  __shared__ int pq_s[kBQ], dq_s[kBQ], pk_s[kBK], dk_s[kBK], span[4];
  __shared__ float lse_s[kBQ], delta_s[kBQ];
  const int d = p.d, ls = d + 1;
  float* ks = smem;
  float* vs = ks + kBK * ls;
  float* qs = vs + kBK * ls;
  float* dos = qs + kBQ * ls;
  float* ps = dos + kBQ * ls;
  float* dss = ps + kBQ * kLdP;
  const int b = blockIdx.z, hk = blockIdx.y;
  const std::int64_t k0 = static_cast<std::int64_t>(blockIdx.x) * kBK;
  const int kn = static_cast<int>(p.tk - k0 < kBK ? p.tk - k0 : kBK);
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const std::int64_t kv_off = static_cast<std::int64_t>(hk) * d;

  stage_mask(pk_s, dk_s, p.pos_k + b * p.tk + k0, p.doc_k ? p.doc_k + b * p.tk + k0 : nullptr, kn, kBK);
  stage_rows(ks, k + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, kn, kBK, d, 1.0f);
  stage_rows(vs, v + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, kn, kBK, d, 1.0f);
  __syncthreads();
  tile_span(pk_s, dk_s, kn, span);
  const int k_pos_min = span[0], k_doc_min = span[2], k_doc_max = span[3];

  constexpr int KI = kBK / 16;
  float dk_acc[KI][NJ], dv_acc[KI][NJ];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) dk_acc[i][jj] = dv_acc[i][jj] = 0.0f;

  for (int g = 0; g < p.group; ++g) {
    const int h = hk * p.group + g;
    const std::int64_t q_off = static_cast<std::int64_t>(h) * d;
    const std::int64_t stat_row = (static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq;
    for (std::int64_t q0 = 0; q0 < p.tq; q0 += kBQ) {
      const int qn = static_cast<int>(p.tq - q0 < kBQ ? p.tq - q0 : kBQ);
      __syncthreads();  // the previous query tile's Q, dO, P, dS and mask are no longer read
      stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kBQ);
      __syncthreads();
      const int t = threadIdx.x;
      const bool maybe = t < qn && pq_s[t] >= k_pos_min && dq_s[t] >= k_doc_min && dq_s[t] <= k_doc_max;
      if (!__syncthreads_or(maybe)) continue;
      stage_rows(qs, q + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, qn, kBQ, d, 1.0f);
      stage_rows(dos, dout + (b * p.tq + q0) * p.ld_o + q_off, p.ld_o, qn, kBQ, d, 1.0f);
      attn::stage_row_stats(lse_s, delta_s, lse + stat_row + q0, delta + stat_row + q0, qn, kBQ);
      __syncthreads();
      p_and_ds(qs, ks, dos, vs, lse_s, delta_s, d, p.scale, qn, kn, pq_s, dq_s, pk_s, dk_s, ty, tx, ps, dss);
      __syncthreads();
      accumulate_ptm<NJ>(ps, dos, d, ty, tx, dv_acc);  // dV += P^T dO
      accumulate_ptm<NJ>(dss, qs, d, ty, tx, dk_acc);  // dK += scale dS^T Q
    }
  }

#pragma unroll
  for (int i = 0; i < KI; ++i) {
    const int kr = ty + 16 * i;
    if (kr >= kn) continue;
    float* dkr = dk + (b * p.tk + k0 + kr) * p.ld_k + kv_off;
    float* dvr = dv + (b * p.tk + k0 + kr) * p.ld_v + kv_off;
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) {
      const int col = tx + 16 * jj;
      if (col < d) {
        dkr[col] = dk_acc[i][jj];
        dvr[col] = dv_acc[i][jj];
      }
    }
  }
}

template <typename T, int NJ>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(Params p, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
              const float* __restrict__ lse, const float* __restrict__ delta, const float* __restrict__ dout,
              float* __restrict__ dq) {
  extern __shared__ float smem[];
  __shared__ int pq_s[kBQ], dq_s[kBQ], pk_s[kBK], dk_s[kBK], span[4];
  __shared__ float lse_s[kBQ], delta_s[kBQ];
  const int d = p.d, ls = d + 1;
  float* qs = smem;
  float* dos = qs + kBQ * ls;
  float* ks = dos + kBQ * ls;
  float* vs = ks + kBK * ls;
  float* dss = vs + kBK * ls;
  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.x) * kBQ;
  const int qn = static_cast<int>(p.tq - q0 < kBQ ? p.tq - q0 : kBQ);
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const std::int64_t q_off = static_cast<std::int64_t>(h) * d, kv_off = static_cast<std::int64_t>(hk) * d;
  const std::int64_t stat_row = (static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq;

  stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kBQ);
  stage_rows(qs, q + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, qn, kBQ, d, 1.0f);
  stage_rows(dos, dout + (b * p.tq + q0) * p.ld_o + q_off, p.ld_o, qn, kBQ, d, 1.0f);
  attn::stage_row_stats(lse_s, delta_s, lse + stat_row + q0, delta + stat_row + q0, qn, kBQ);
  __syncthreads();
  tile_span(pq_s, dq_s, qn, span);
  const int q_pos_max = span[1], q_doc_min = span[2], q_doc_max = span[3];

  float acc[kRI][NJ];
#pragma unroll
  for (int i = 0; i < kRI; ++i)
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) acc[i][jj] = 0.0f;

  for (std::int64_t k0 = 0; k0 < p.tk; k0 += kBK) {
    const int kn = static_cast<int>(p.tk - k0 < kBK ? p.tk - k0 : kBK);
    __syncthreads();
    stage_mask(pk_s, dk_s, p.pos_k + b * p.tk + k0, p.doc_k ? p.doc_k + b * p.tk + k0 : nullptr, kn, kBK);
    __syncthreads();
    const int t = threadIdx.x;
    const bool maybe = t < kn && pk_s[t] <= q_pos_max && dk_s[t] >= q_doc_min && dk_s[t] <= q_doc_max;
    if (!__syncthreads_or(maybe)) continue;
    stage_rows(ks, k + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, kn, kBK, d, 1.0f);
    stage_rows(vs, v + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, kn, kBK, d, 1.0f);
    __syncthreads();
    p_and_ds(qs, ks, dos, vs, lse_s, delta_s, d, p.scale, qn, kn, pq_s, dq_s, pk_s, dk_s, ty, tx, nullptr, dss);
    __syncthreads();
    accumulate_pm<NJ>(dss, ks, d, ty, tx, acc);  // dQ += scale dS K
  }

#pragma unroll
  for (int i = 0; i < kRI; ++i) {
    const int r = ty + 16 * i;
    if (r >= qn) continue;
    float* o = dq + (b * p.tq + q0 + r) * p.ld_q + q_off;
#pragma unroll
    for (int jj = 0; jj < NJ; ++jj) {
      const int col = tx + 16 * jj;
      if (col < d) o[col] = acc[i][jj];
    }
  }
}

std::size_t forward_smem(int d) {
  return sizeof(float) * (static_cast<std::size_t>(kBQ + 2 * kBK) * (d + 1) + kBQ * kLdP);
}
std::size_t dkdv_smem(int d) {
  return sizeof(float) * (static_cast<std::size_t>(2 * kBK + 2 * kBQ) * (d + 1) + 2 * kBQ * kLdP);
}
std::size_t dq_smem(int d) {
  return sizeof(float) * (static_cast<std::size_t>(2 * kBQ + 2 * kBK) * (d + 1) + kBQ * kLdP);
}

template <typename T, int NJ>
void forward_launch(const Params& p, std::int64_t batch, const T* q, const T* k, const T* v, T* out, float* lse) {
  const std::size_t smem = forward_smem(p.d);
  allow_smem(forward_kernel<T, NJ>, smem);
  const dim3 grid(tiles_of(p.tq, kBQ), static_cast<unsigned>(p.q_heads), static_cast<unsigned>(batch));
  forward_kernel<T, NJ><<<grid, kThreads, smem, stream()>>>(p, q, k, v, out, lse);
  HERD_CUDA_LAUNCHED("attention_forward");
}

template <typename T, int NJ>
void backward_launch(const Params& p, std::int64_t batch, const T* q, const T* k, const T* v, const T* out,
                     const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  if (p.tq == 0) {  // no query: dk and dv are zero
    if (p.tk > 0) {
      const std::size_t smem = dkdv_smem(p.d);
      allow_smem(dkdv_kernel<T, NJ>, smem);
      const dim3 grid(tiles_of(p.tk, kBK), static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(batch));
      dkdv_kernel<T, NJ><<<grid, kThreads, smem, stream()>>>(p, q, k, v, lse, nullptr, dout, dk, dv);
      HERD_CUDA_LAUNCHED("attention_backward dk dv");
    }
    return;
  }
  const std::int64_t rows = batch * p.tq * p.q_heads;
  DeviceBuffer<float> delta(rows);
  delta_kernel<T><<<grid_for(rows, kThreads / 32, 65535), kThreads, 0, stream()>>>(p, rows, out, dout, delta.data());
  HERD_CUDA_LAUNCHED("attention_backward delta");
  if (p.tk > 0) {
    const std::size_t smem = dkdv_smem(p.d);
    allow_smem(dkdv_kernel<T, NJ>, smem);
    const dim3 grid(tiles_of(p.tk, kBK), static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(batch));
    dkdv_kernel<T, NJ><<<grid, kThreads, smem, stream()>>>(p, q, k, v, lse, delta.data(), dout, dk, dv);
    HERD_CUDA_LAUNCHED("attention_backward dk dv");
  }
  const std::size_t smem = dq_smem(p.d);
  allow_smem(dq_kernel<T, NJ>, smem);
  const dim3 grid(tiles_of(p.tq, kBQ), static_cast<unsigned>(p.q_heads), static_cast<unsigned>(batch));
  dq_kernel<T, NJ><<<grid, kThreads, smem, stream()>>>(p, q, k, v, lse, delta.data(), dout, dq);
  HERD_CUDA_LAUNCHED("attention_backward dq");
  // `delta` goes back to the caching allocator here; it is reused on this stream only, after the
  // kernels above (stream order), so freeing before they finish is safe.
}

template <typename T>
void forward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v, T* out, float* lse) {
  const Params p = params_of(d, m);
  if (p.tq == 0) return;
  if (p.d <= 16) {
    forward_launch<T, 1>(p, d.batch, q, k, v, out, lse);
  } else if (p.d <= 32) {
    forward_launch<T, 2>(p, d.batch, q, k, v, out, lse);
  } else if (p.d <= 64) {
    forward_launch<T, 4>(p, d.batch, q, k, v, out, lse);
  } else {
    forward_launch<T, 8>(p, d.batch, q, k, v, out, lse);
  }
}

template <typename T>
void backward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v, const T* out,
              const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  const Params p = params_of(d, m);
  if (p.d <= 16) {
    backward_launch<T, 1>(p, d.batch, q, k, v, out, lse, dout, dq, dk, dv);
  } else if (p.d <= 32) {
    backward_launch<T, 2>(p, d.batch, q, k, v, out, lse, dout, dq, dk, dv);
  } else if (p.d <= 64) {
    backward_launch<T, 4>(p, d.batch, q, k, v, out, lse, dout, dq, dk, dv);
  } else {
    backward_launch<T, 8>(p, d.batch, q, k, v, out, lse, dout, dq, dk, dv);
  }
}

}  // namespace

namespace {
std::atomic<AttentionKernels> g_attention_kernels{AttentionKernels::kMma};
AttentionPartHook g_part_hook = nullptr;
void* g_part_arg = nullptr;
}  // namespace

void set_attention_kernels(AttentionKernels kernels) { g_attention_kernels.store(kernels, std::memory_order_relaxed); }
AttentionKernels attention_kernels() { return g_attention_kernels.load(std::memory_order_relaxed); }
void set_attention_part_hook(AttentionPartHook hook, void* arg) {
  g_part_hook = hook;
  g_part_arg = arg;
}

namespace attn {
void mark_part(AttentionPart part) {
  if (g_part_hook) g_part_hook(part, g_part_arg);
}
}  // namespace attn

void attention_forward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k, const float* v,
                       float* out, float* lse) {
  forward<float>(d, m, q, k, v, out, lse);
}

void attention_backward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  backward<float>(d, m, q, k, v, out, lse, dout, dq, dk, dv);
}

void attention_forward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                       bf16* out, float* lse) {
  const Params p = params_of(d, m);
  if (attn::tensor_cores_apply(p)) return attn::forward_mma(p, d.batch, dev(q), dev(k), dev(v), dev(out), lse);
  forward<__nv_bfloat16>(d, m, dev(q), dev(k), dev(v), dev(out), lse);
}

void attention_backward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  const Params p = params_of(d, m);
  if (attn::tensor_cores_apply(p)) {
    return attn::backward_mma(p, d.batch, dev(q), dev(k), dev(v), dev(out), lse, dout, dq, dk, dv);
  }
  backward<__nv_bfloat16>(d, m, dev(q), dev(k), dev(v), dev(out), lse, dout, dq, dk, dv);
}

}  // namespace herd::kernels::cuda
