// Tensor-core flash attention for bf16 q, k, v (kernels/attention.h; the CUDA-core kernels and the
// masking / skipping rules it shares: attention.cu, attention_common.cuh). Taken by the bf16 calls with
// head_dim D a multiple of 16 up to 128 while set_attention_kernels names kWmma (kernels.h; the default
// is attention_mma.cu's kMma, this file's kernels stay as its cross-check); the delta kernel of
// attention_mma_backward.cu repeats this file's products in the same order (and keeps bf16(dO)).
//
// Products: nvcuda::wmma 16 x 16 x 16 fragments, bf16 operands and fp32 accumulators. Fragment layouts
// stay opaque: every fragment goes through shared memory (load_matrix_sync / store_matrix_sync), and
// the element-wise work (mask, softmax, rescaling) reads the stored fp32 tiles by explicit row and
// column. Numerics (FlashAttention-2's bf16 recipe, as kernels/cpu/attention_bf16.cpp):
//   forward   S = Q K^T of the bf16 inputs in fp32, times scale = 1/sqrt(D) in fp32 (q is not
//             pre-scaled, so it is not rounded again); running max, exponentials and their sum l in
//             fp32 (l sums the unrounded P); P rounded to bf16 for P V; out = acc / l rounded to bf16,
//             lse = m + log l.
//   backward  dO (fp32 in the contract) rounded to bf16 as it is staged: it enters dP = dO V^T and
//             dV += P^T dO on the tensor cores, and delta = rowsum(bf16(dO) * out) uses the same
//             rounded values. P = exp(S scale - lse) in fp32, dS = P (dP - delta) in fp32 from the
//             unrounded P; bf16(P) for dV, bf16(scale dS) for dK += dS^T Q and dQ += dS K. Every sum fp32.
//
// Kernels (kBQ = kBK = 64: 64 queries x 64 keys per tile):
//   forward   128 threads = 4 warps, grid (ceil(Tq/64), Hq, B). Warp w owns query rows 16w..16w+15 of
//             the tile throughout, so only K/V staging needs block barriers. Per key tile the warp
//             computes its 16 x 64 S into shared fp32, the softmax pass gives query row 16w + lane/2 to
//             lanes 2r and 2r+1 (32 key columns each, a shuffle joins them) and writes bf16 P; the
//             running output (16 x D per warp, fp32) lives in shared memory, where the same lanes rescale
//             it by exp(m_old - m_new) before the P V fragments accumulate onto it (accumulator
//             fragments loaded from and stored back to shared memory).
//   delta     one warp per (token, query head), as attention.cu's but with dO rounded to bf16.
//   dkdv      256 threads = 8 warps, grid (ceil(Tk/64), Hkv, B); loops over the group's query heads and
//             their query tiles. Per tile: S and dP (64 x 64 each, 16 fragments each, warp w computes
//             row block w%4 and column blocks 2(w/4), 2(w/4)+1) into shared fp32; the block turns them
//             into bf16 P and dS (thread t: query row t/4, 16 key columns); dV += P^T dO and
//             dK += dS^T Q in register fragments: warp w owns key block w%4 and the column blocks
//             j = w/4, w/4 + 2, ... of D (ceil(D/32) fragments of each). P^T and dS^T are read as
//             col_major matrix_a fragments of the row-major P / dS tiles (no transpose is stored).
//             dK and dV leave through shared memory (overwrite, rows < Tk only).
//   dq        256 threads, grid (ceil(Tq/64), Hq, B); per key tile the same S, dP and dS, then
//             dQ += dS K with the same split (warp w: query block w%4, column blocks w/4 + 2i).
//             A separate pass, as in attention.cu: deterministic, no atomics, no zeroing of dq.
// Shared memory (dynamic; bf16 tiles with rows of D + 8 elements, fp32 tiles with rows of 64 + 4 or
// D + 4 floats: 16-byte multiples as wmma's ldm needs, every fragment pointer 32-byte aligned, and row
// starts spread over the banks), at D = 128 / D = 64:
//   forward   Q, K, V bf16 + P bf16 + S fp32 + O fp32                      110 KiB / 70 KiB
//   dkdv      K, V, Q, dO bf16 + S, dP fp32 + P, dS bf16                   120 KiB / 88 KiB
//   dq        Q, dO, K, V bf16 + S, dP fp32 + dS bf16                      111 KiB / 79 KiB
// (sm_90: 227 KiB per block with the opt-in). Masking and tile skipping as attention.cu: a key tile
// (forward, dq) or query tile (dkdv) that no pair can see is skipped by the whole block.
#include <mma.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "herd/kernels/cuda/attention_common.cuh"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda {

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

namespace attn {
namespace {

namespace wmma = nvcuda::wmma;
using bf = __nv_bfloat16;

constexpr int kBQ = 64;  // query rows per tile
constexpr int kBK = 64;  // keys per tile
constexpr int kFwdThreads = 128;
constexpr int kBwdThreads = 256;
constexpr int kLdS = kBK + 4;  // fp32 score-tile row stride (floats)
constexpr int kLdP = kBK + 8;  // bf16 P / dS tile row stride (elements)
constexpr unsigned kFull = 0xffffffffu;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf, wmma::col_major>;  // A^T of a row-major tile
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf, wmma::col_major>;  // B^T of a row-major tile
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <int NF>
__global__ void __launch_bounds__(kFwdThreads)
    tc_forward_kernel(Params p, const bf* __restrict__ q, const bf* __restrict__ k, const bf* __restrict__ v,
                      bf* __restrict__ out, float* __restrict__ lse) {
  constexpr int D = NF * 16, kLdX = D + 8, kLdO = D + 4, kHalf = D / 2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int pq_s[kBQ], dq_s[kBQ], pk_s[kBK], dk_s[kBK], span[4];
  bf* qs = reinterpret_cast<bf*>(smem_raw);
  bf* ks = qs + kBQ * kLdX;
  bf* vs = ks + kBK * kLdX;
  bf* ps = vs + kBK * kLdX;                               // (64, kLdP) bf16 P
  float* ss = reinterpret_cast<float*>(ps + kBQ * kLdP);  // (64, kLdS) fp32 S
  float* os = ss + kBQ * kLdS;                            // (64, kLdO) fp32 running output
  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.x) * kBQ;
  const int qn = static_cast<int>(p.tq - q0 < kBQ ? p.tq - q0 : kBQ);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = 16 * warp;        // the warp's first query row
  const int r = r0 + (lane >> 1);  // this lane's softmax row
  const int hh = lane & 1;         // which half of the row's columns
  const std::int64_t kv_off = static_cast<std::int64_t>(hk) * D;

  stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kBQ);
  stage_bf16<kFwdThreads, kBQ>(qs, kLdX, q + (b * p.tq + q0) * p.ld_q + static_cast<std::int64_t>(h) * D, p.ld_q, qn,
                               D);
  for (int c = lane; c < 16 * kLdO; c += 32) os[r0 * kLdO + c] = 0.0f;  // the warp's output rows
  __syncthreads();
  tile_span(pq_s, dq_s, qn, span);
  const int q_pos_max = span[1], q_doc_min = span[2], q_doc_max = span[3];

  float row_m = -INFINITY, row_l = 0.0f;  // of row r (both lanes of the row hold them)
  for (std::int64_t k0 = 0; k0 < p.tk; k0 += kBK) {
    const int kn = static_cast<int>(p.tk - k0 < kBK ? p.tk - k0 : kBK);
    __syncthreads();  // the previous tile's K, V and mask are no longer read
    stage_mask(pk_s, dk_s, p.pos_k + b * p.tk + k0, p.doc_k ? p.doc_k + b * p.tk + k0 : nullptr, kn, kBK);
    __syncthreads();
    const int t = threadIdx.x;
    const bool maybe = t < kn && pk_s[t] <= q_pos_max && dk_s[t] >= q_doc_min && dk_s[t] <= q_doc_max;
    if (!__syncthreads_or(maybe)) continue;  // no pair of this tile is visible (uniform across the block)
    stage_bf16<kFwdThreads, kBQ>(ks, kLdX, k + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, kn, D);
    stage_bf16<kFwdThreads, kBQ>(vs, kLdX, v + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, kn, D);
    __syncthreads();

    // S (16 x 64) = Q_w K^T: K^T's 16 x 16 blocks are col_major matrix_b views of K's rows.
    {
      FragC sf[kBK / 16];
#pragma unroll
      for (int j = 0; j < kBK / 16; ++j) wmma::fill_fragment(sf[j], 0.0f);
#pragma unroll
      for (int kk = 0; kk < NF; ++kk) {
        FragA a;
        wmma::load_matrix_sync(a, qs + r0 * kLdX + 16 * kk, kLdX);
#pragma unroll
        for (int j = 0; j < kBK / 16; ++j) {
          FragBT bt;
          wmma::load_matrix_sync(bt, ks + (16 * j) * kLdX + 16 * kk, kLdX);
          wmma::mma_sync(sf[j], a, bt, sf[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kBK / 16; ++j)
        wmma::store_matrix_sync(ss + r0 * kLdS + 16 * j, sf[j], kLdS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of row r over its 64 columns (lane pair 2r', 2r'+1: columns 32 hh + 0..31, visited
    // from a lane-dependent start so the 32 lanes hit 32 distinct banks).
    float* srow = ss + r * kLdS;
    bf* prow = ps + r * kLdP;
    float mx = -INFINITY;
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const int kc = 32 * hh + ((c + lane) & 31);
      float s = srow[kc] * p.scale;
      if (!visible(r, kc, qn, kn, pq_s, dq_s, pk_s, dk_s)) s = -INFINITY;
      srow[kc] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
    const float mnew = fmaxf(row_m, mx);
    const float alpha = row_m == -INFINITY ? 0.0f : expf(row_m - mnew);
    float sum = 0.0f;
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const int kc = 32 * hh + ((c + lane) & 31);
      const float s = srow[kc];
      const float pij = s == -INFINITY ? 0.0f : expf(s - mnew);
      sum += pij;  // l sums the unrounded P
      prow[kc] = narrow_bf16(pij);
    }
    sum += __shfl_xor_sync(kFull, sum, 1);
    row_l = row_l * alpha + sum;
    row_m = mnew;
    float* orow = os + r * kLdO + hh * kHalf;
#pragma unroll 8
    for (int c = 0; c < kHalf; ++c) {
      const int cc = (c + lane) % kHalf;
      orow[cc] *= alpha;
    }
    __syncwarp();

    // O_w (16 x D) += P_w (16 x 64) V (64 x D), onto the accumulator kept in shared memory.
    {
      FragA pa[kBK / 16];
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) wmma::load_matrix_sync(pa[kk], ps + r0 * kLdP + 16 * kk, kLdP);
#pragma unroll
      for (int j = 0; j < NF; ++j) {
        FragC of;
        wmma::load_matrix_sync(of, os + r0 * kLdO + 16 * j, kLdO, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          FragB vb;
          wmma::load_matrix_sync(vb, vs + (16 * kk) * kLdX + 16 * j, kLdX);
          wmma::mma_sync(of, pa[kk], vb, of);
        }
        wmma::store_matrix_sync(os + r0 * kLdO + 16 * j, of, kLdO, wmma::mem_row_major);
      }
    }
    __syncwarp();
  }

  // out = O / l (0 for a row that saw no key), lse = m + log l (-inf there). The warp writes its 16
  // rows together (consecutive lanes, consecutive columns); row rr's 1/l comes from lane 2 rr.
  const float inv = row_l > 0.0f ? 1.0f / row_l : 0.0f;
  for (int idx = lane; idx < 16 * D; idx += 32) {
    const int rr = idx / D, c = idx - rr * D;
    const float inv_r = __shfl_sync(kFull, inv, 2 * rr);
    if (r0 + rr < qn) {
      out[(b * p.tq + q0 + r0 + rr) * p.ld_o + static_cast<std::int64_t>(h) * D + c] =
          narrow_bf16(os[(r0 + rr) * kLdO + c] * inv_r);
    }
  }
  if (hh == 0 && r < qn) {
    lse[(static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq + q0 + r] =
        row_l > 0.0f ? row_m + logf(row_l) : -INFINITY;
  }
}

// delta[(b, h, i)] = sum_c out[b, i, h, c] * bf16(dout[b, i, h, c]): one warp per (token, head).
__global__ void __launch_bounds__(kBwdThreads)
    tc_delta_kernel(Params p, std::int64_t rows, const bf* __restrict__ out, const float* __restrict__ dout,
                    float* __restrict__ delta) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (kBwdThreads / 32);
  const int lane = threadIdx.x & 31;
  for (std::int64_t w = blockIdx.x * static_cast<std::int64_t>(kBwdThreads / 32) + (threadIdx.x >> 5); w < rows;
       w += warps) {
    const std::int64_t token = w / p.q_heads;
    const int h = static_cast<int>(w - token * p.q_heads);
    const std::int64_t off = token * p.ld_o + static_cast<std::int64_t>(h) * p.d;
    float sum = 0.0f;
    for (int c = lane; c < p.d; c += 32) sum = fmaf(widen(out[off + c]), widen(narrow_bf16(dout[off + c])), sum);
    sum = warp_sum(sum);
    const std::int64_t b = token / p.tq, i = token - b * p.tq;
    if (lane == 0) delta[(b * p.q_heads + h) * p.tq + i] = sum;
  }
}

// S = Q K^T and dP = dO V^T of one 64 x 64 tile pair into ss and dps (fp32, stride kLdS), 8 warps:
// warp w computes row block w % 4, column blocks 2 (w / 4) and 2 (w / 4) + 1 of both.
template <int NF>
__device__ __forceinline__ void scores_and_dp(const bf* qs, const bf* dos, const bf* ks, const bf* vs, float* ss,
                                              float* dps) {
  constexpr int kLdX = NF * 16 + 8;
  const int warp = threadIdx.x >> 5, rb = warp & 3, cb = (warp >> 2) * 2;
  FragC sf[2], df[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    wmma::fill_fragment(sf[j], 0.0f);
    wmma::fill_fragment(df[j], 0.0f);
  }
#pragma unroll
  for (int kk = 0; kk < NF; ++kk) {
    FragA qa, da;
    wmma::load_matrix_sync(qa, qs + (16 * rb) * kLdX + 16 * kk, kLdX);
    wmma::load_matrix_sync(da, dos + (16 * rb) * kLdX + 16 * kk, kLdX);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      FragBT bt;
      wmma::load_matrix_sync(bt, ks + (16 * (cb + j)) * kLdX + 16 * kk, kLdX);
      wmma::mma_sync(sf[j], qa, bt, sf[j]);
      wmma::load_matrix_sync(bt, vs + (16 * (cb + j)) * kLdX + 16 * kk, kLdX);
      wmma::mma_sync(df[j], da, bt, df[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    wmma::store_matrix_sync(ss + (16 * rb) * kLdS + 16 * (cb + j), sf[j], kLdS, wmma::mem_row_major);
    wmma::store_matrix_sync(dps + (16 * rb) * kLdS + 16 * (cb + j), df[j], kLdS, wmma::mem_row_major);
  }
}

// P and dS of the tile from the stored S and dP (256 threads: thread t takes query row t / 4 and key
// columns 16 (t % 4) + 0..15): p = exp(s scale - lse) where visible and the row saw a key, else 0;
// ds = p (dp - delta) scale. bf16(p) into pb (when not null), bf16(ds) into dsb.
__device__ __forceinline__ void p_and_ds(const float* ss, const float* dps, const float* lse_s, const float* delta_s,
                                         float scale, int qn, int kn, const int* pq, const int* dq, const int* pk,
                                         const int* dk, bf* pb, bf* dsb) {
  const int r = threadIdx.x >> 2, c0 = 16 * (threadIdx.x & 3);
  const float li = lse_s[r], di = delta_s[r];
#pragma unroll 4
  for (int c = 0; c < 16; ++c) {
    const int kc = c0 + c;
    const bool vis = li != -INFINITY && visible(r, kc, qn, kn, pq, dq, pk, dk);
    const float pij = vis ? expf(ss[r * kLdS + kc] * scale - li) : 0.0f;
    if (pb) pb[r * kLdP + kc] = narrow_bf16(pij);
    dsb[r * kLdP + kc] = narrow_bf16(pij * (dps[r * kLdS + kc] - di) * scale);
  }
}

// 64 rows of an fp32 tile in shared memory (stride ldt) to global rows (stride ld), rows < valid.
template <int D>
__device__ __forceinline__ void write_rows(float* dst, std::int64_t ld, const float* tile, int ldt, int valid) {
  for (int idx = threadIdx.x; idx < kBQ * D; idx += kBwdThreads) {
    const int r = idx / D, c = idx - r * D;
    if (r < valid) dst[r * ld + c] = tile[r * ldt + c];
  }
}

template <int NF>
__global__ void __launch_bounds__(kBwdThreads)
    tc_dkdv_kernel(Params p, const bf* __restrict__ q, const bf* __restrict__ k, const bf* __restrict__ v,
                   const float* __restrict__ lse, const float* __restrict__ delta, const float* __restrict__ dout,
                   float* __restrict__ dk, float* __restrict__ dv) {
  constexpr int D = NF * 16, kLdX = D + 8, kLdT = D + 4, NH = (NF + 1) / 2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int pq_s[kBQ], dq_s[kBQ], pk_s[kBK], dk_s[kBK], span[4];
  __shared__ float lse_s[kBQ], delta_s[kBQ];
  bf* ks = reinterpret_cast<bf*>(smem_raw);
  bf* vs = ks + kBK * kLdX;
  bf* qs = vs + kBK * kLdX;
  bf* dos = qs + kBQ * kLdX;
  bf* pb = dos + kBQ * kLdX;
  bf* dsb = pb + kBQ * kLdP;
  float* ss = reinterpret_cast<float*>(dsb + kBQ * kLdP);
  float* dps = ss + kBQ * kLdS;
  float* ts = ss;  // (64, kLdT) fp32 staging of dK / dV at the end (over S and dP: 64 (D + 4) <= 2 * 64 * 68)
  const int b = blockIdx.z, hk = blockIdx.y;
  const std::int64_t k0 = static_cast<std::int64_t>(blockIdx.x) * kBK;
  const int kn = static_cast<int>(p.tk - k0 < kBK ? p.tk - k0 : kBK);
  const int warp = threadIdx.x >> 5, kb = warp & 3, jb = warp >> 2;
  const std::int64_t kv_off = static_cast<std::int64_t>(hk) * D;

  stage_mask(pk_s, dk_s, p.pos_k + b * p.tk + k0, p.doc_k ? p.doc_k + b * p.tk + k0 : nullptr, kn, kBK);
  stage_bf16<kBwdThreads, kBQ>(ks, kLdX, k + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, kn, D);
  stage_bf16<kBwdThreads, kBQ>(vs, kLdX, v + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, kn, D);
  __syncthreads();
  tile_span(pk_s, dk_s, kn, span);
  const int k_pos_min = span[0], k_doc_min = span[2], k_doc_max = span[3];

  // Warp w accumulates key block kb = w % 4, column blocks jb + 2 i (i < NH, jb + 2 i < NF) of dK, dV.
  FragC dkf[NH], dvf[NH];
#pragma unroll
  for (int i = 0; i < NH; ++i) {
    wmma::fill_fragment(dkf[i], 0.0f);
    wmma::fill_fragment(dvf[i], 0.0f);
  }

  for (int g = 0; g < p.group; ++g) {
    const int h = hk * p.group + g;
    const std::int64_t q_off = static_cast<std::int64_t>(h) * D;
    const std::int64_t stat_row = (static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq;
    for (std::int64_t q0 = 0; q0 < p.tq; q0 += kBQ) {
      const int qn = static_cast<int>(p.tq - q0 < kBQ ? p.tq - q0 : kBQ);
      __syncthreads();  // the previous query tile's Q, dO, P, dS and mask are no longer read
      stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kBQ);
      __syncthreads();
      const int t = threadIdx.x;
      const bool maybe = t < qn && pq_s[t] >= k_pos_min && dq_s[t] >= k_doc_min && dq_s[t] <= k_doc_max;
      if (!__syncthreads_or(maybe)) continue;
      stage_bf16<kBwdThreads, kBQ>(qs, kLdX, q + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, qn, D);
      stage_dout<kBwdThreads, kBQ>(dos, kLdX, dout + (b * p.tq + q0) * p.ld_o + q_off, p.ld_o, qn, D);
      stage_row_stats(lse_s, delta_s, lse + stat_row + q0, delta + stat_row + q0, qn, kBQ);
      __syncthreads();
      scores_and_dp<NF>(qs, dos, ks, vs, ss, dps);
      __syncthreads();
      p_and_ds(ss, dps, lse_s, delta_s, p.scale, qn, kn, pq_s, dq_s, pk_s, dk_s, pb, dsb);
      __syncthreads();
      // dV (key block kb) += P^T dO and dK += dS^T Q, summed over the tile's four 16-query blocks:
      // (P^T)[key i][query r] = P[r][i] is P's row-major tile read as a col_major matrix_a.
      FragAT pt[kBQ / 16], dst[kBQ / 16];
#pragma unroll
      for (int kk = 0; kk < kBQ / 16; ++kk) {
        wmma::load_matrix_sync(pt[kk], pb + (16 * kk) * kLdP + 16 * kb, kLdP);
        wmma::load_matrix_sync(dst[kk], dsb + (16 * kk) * kLdP + 16 * kb, kLdP);
      }
#pragma unroll
      for (int i = 0; i < NH; ++i) {
        const int j = jb + 2 * i;
        if (j >= NF) continue;
#pragma unroll
        for (int kk = 0; kk < kBQ / 16; ++kk) {
          FragB m;
          wmma::load_matrix_sync(m, dos + (16 * kk) * kLdX + 16 * j, kLdX);
          wmma::mma_sync(dvf[i], pt[kk], m, dvf[i]);
          wmma::load_matrix_sync(m, qs + (16 * kk) * kLdX + 16 * j, kLdX);
          wmma::mma_sync(dkf[i], dst[kk], m, dkf[i]);
        }
      }
    }
  }

  // dK then dV through the staging tile (overwrite; rows past Tk untouched).
  __syncthreads();
#pragma unroll
  for (int i = 0; i < NH; ++i) {
    const int j = jb + 2 * i;
    if (j < NF) wmma::store_matrix_sync(ts + (16 * kb) * kLdT + 16 * j, dkf[i], kLdT, wmma::mem_row_major);
  }
  __syncthreads();
  write_rows<D>(dk + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, ts, kLdT, kn);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < NH; ++i) {
    const int j = jb + 2 * i;
    if (j < NF) wmma::store_matrix_sync(ts + (16 * kb) * kLdT + 16 * j, dvf[i], kLdT, wmma::mem_row_major);
  }
  __syncthreads();
  write_rows<D>(dv + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, ts, kLdT, kn);
}

template <int NF>
__global__ void __launch_bounds__(kBwdThreads)
    tc_dq_kernel(Params p, const bf* __restrict__ q, const bf* __restrict__ k, const bf* __restrict__ v,
                 const float* __restrict__ lse, const float* __restrict__ delta, const float* __restrict__ dout,
                 float* __restrict__ dq) {
  constexpr int D = NF * 16, kLdX = D + 8, kLdT = D + 4, NH = (NF + 1) / 2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int pq_s[kBQ], dq_s[kBQ], pk_s[kBK], dk_s[kBK], span[4];
  __shared__ float lse_s[kBQ], delta_s[kBQ];
  bf* qs = reinterpret_cast<bf*>(smem_raw);
  bf* dos = qs + kBQ * kLdX;
  bf* ks = dos + kBQ * kLdX;
  bf* vs = ks + kBK * kLdX;
  bf* dsb = vs + kBK * kLdX;
  float* ss = reinterpret_cast<float*>(dsb + kBQ * kLdP);
  float* dps = ss + kBQ * kLdS;
  float* ts = ss;  // (64, kLdT) fp32 staging of dQ at the end
  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.x) * kBQ;
  const int qn = static_cast<int>(p.tq - q0 < kBQ ? p.tq - q0 : kBQ);
  const int warp = threadIdx.x >> 5, rb = warp & 3, jb = warp >> 2;
  const std::int64_t q_off = static_cast<std::int64_t>(h) * D, kv_off = static_cast<std::int64_t>(hk) * D;
  const std::int64_t stat_row = (static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq;

  stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kBQ);
  stage_bf16<kBwdThreads, kBQ>(qs, kLdX, q + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, qn, D);
  stage_dout<kBwdThreads, kBQ>(dos, kLdX, dout + (b * p.tq + q0) * p.ld_o + q_off, p.ld_o, qn, D);
  stage_row_stats(lse_s, delta_s, lse + stat_row + q0, delta + stat_row + q0, qn, kBQ);
  __syncthreads();
  tile_span(pq_s, dq_s, qn, span);
  const int q_pos_max = span[1], q_doc_min = span[2], q_doc_max = span[3];

  // Warp w accumulates query block rb = w % 4, column blocks jb + 2 i of dQ.
  FragC dqf[NH];
#pragma unroll
  for (int i = 0; i < NH; ++i) wmma::fill_fragment(dqf[i], 0.0f);

  for (std::int64_t k0 = 0; k0 < p.tk; k0 += kBK) {
    const int kn = static_cast<int>(p.tk - k0 < kBK ? p.tk - k0 : kBK);
    __syncthreads();  // the previous key tile's K, V, dS and mask are no longer read
    stage_mask(pk_s, dk_s, p.pos_k + b * p.tk + k0, p.doc_k ? p.doc_k + b * p.tk + k0 : nullptr, kn, kBK);
    __syncthreads();
    const int t = threadIdx.x;
    const bool maybe = t < kn && pk_s[t] <= q_pos_max && dk_s[t] >= q_doc_min && dk_s[t] <= q_doc_max;
    if (!__syncthreads_or(maybe)) continue;
    stage_bf16<kBwdThreads, kBQ>(ks, kLdX, k + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, kn, D);
    stage_bf16<kBwdThreads, kBQ>(vs, kLdX, v + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, kn, D);
    __syncthreads();
    scores_and_dp<NF>(qs, dos, ks, vs, ss, dps);
    __syncthreads();
    p_and_ds(ss, dps, lse_s, delta_s, p.scale, qn, kn, pq_s, dq_s, pk_s, dk_s, nullptr, dsb);
    __syncthreads();
    // dQ (query block rb) += dS K over the tile's four 16-key blocks.
    FragA da[kBK / 16];
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) wmma::load_matrix_sync(da[kk], dsb + (16 * rb) * kLdP + 16 * kk, kLdP);
#pragma unroll
    for (int i = 0; i < NH; ++i) {
      const int j = jb + 2 * i;
      if (j >= NF) continue;
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        FragB kf;
        wmma::load_matrix_sync(kf, ks + (16 * kk) * kLdX + 16 * j, kLdX);
        wmma::mma_sync(dqf[i], da[kk], kf, dqf[i]);
      }
    }
  }

  __syncthreads();
#pragma unroll
  for (int i = 0; i < NH; ++i) {
    const int j = jb + 2 * i;
    if (j < NF) wmma::store_matrix_sync(ts + (16 * rb) * kLdT + 16 * j, dqf[i], kLdT, wmma::mem_row_major);
  }
  __syncthreads();
  write_rows<D>(dq + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, ts, kLdT, qn);
}

constexpr std::size_t bf_tile(int d) { return sizeof(bf) * kBQ * static_cast<std::size_t>(d + 8); }
constexpr std::size_t forward_smem(int d) {
  return 3 * bf_tile(d) + sizeof(bf) * kBQ * kLdP + sizeof(float) * kBQ * (kLdS + static_cast<std::size_t>(d + 4));
}
constexpr std::size_t dkdv_smem(int d) {
  return 4 * bf_tile(d) + 2 * sizeof(bf) * kBQ * kLdP + 2 * sizeof(float) * kBQ * kLdS;
}
constexpr std::size_t dq_smem(int d) {
  return 4 * bf_tile(d) + sizeof(bf) * kBQ * kLdP + 2 * sizeof(float) * kBQ * kLdS;
}
static_assert(forward_smem(kMaxHeadDim) <= 227 * 1024 && dkdv_smem(kMaxHeadDim) <= 227 * 1024 &&
                  dq_smem(kMaxHeadDim) <= 227 * 1024,
              "tensor-core attention tiles exceed sm_90's shared memory per block");
// The dK / dV / dQ staging tile (64 x (D + 4) floats) fits over the S and dP tiles.
static_assert(kBQ * (kMaxHeadDim + 4) <= 2 * kBQ * kLdS, "staging tile larger than S + dP");

template <int NF>
void forward_launch(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, bf* out, float* lse) {
  const std::size_t smem = forward_smem(NF * 16);
  allow_smem(tc_forward_kernel<NF>, smem);
  const dim3 grid(tiles_of(p.tq, kBQ), static_cast<unsigned>(p.q_heads), static_cast<unsigned>(batch));
  mark_part(AttentionPart::kForward);
  tc_forward_kernel<NF><<<grid, kFwdThreads, smem, stream()>>>(p, q, k, v, out, lse);
  HERD_CUDA_LAUNCHED("attention_forward (tensor cores)");
}

template <int NF>
void backward_launch(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, const bf* out,
                     const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  const dim3 kv_grid(tiles_of(p.tk, kBK), static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(batch));
  if (p.tq == 0) {  // no query: dk and dv are zero (the kernel finds no query tile)
    if (p.tk > 0) {
      allow_smem(tc_dkdv_kernel<NF>, dkdv_smem(NF * 16));
      mark_part(AttentionPart::kDkdv);
      tc_dkdv_kernel<NF>
          <<<kv_grid, kBwdThreads, dkdv_smem(NF * 16), stream()>>>(p, q, k, v, lse, nullptr, dout, dk, dv);
      HERD_CUDA_LAUNCHED("attention_backward dk dv (tensor cores)");
    }
    return;
  }
  DeviceBuffer<float> delta(batch * p.tq * p.q_heads);
  delta_tc(p, batch, out, dout, delta.data());
  if (p.tk > 0) {
    allow_smem(tc_dkdv_kernel<NF>, dkdv_smem(NF * 16));
    mark_part(AttentionPart::kDkdv);
    tc_dkdv_kernel<NF>
        <<<kv_grid, kBwdThreads, dkdv_smem(NF * 16), stream()>>>(p, q, k, v, lse, delta.data(), dout, dk, dv);
    HERD_CUDA_LAUNCHED("attention_backward dk dv (tensor cores)");
  }
  allow_smem(tc_dq_kernel<NF>, dq_smem(NF * 16));
  const dim3 q_grid(tiles_of(p.tq, kBQ), static_cast<unsigned>(p.q_heads), static_cast<unsigned>(batch));
  mark_part(AttentionPart::kDq);
  tc_dq_kernel<NF><<<q_grid, kBwdThreads, dq_smem(NF * 16), stream()>>>(p, q, k, v, lse, delta.data(), dout, dq);
  HERD_CUDA_LAUNCHED("attention_backward dq (tensor cores)");
  // `delta` returns to the caching allocator, reused on this stream only after the kernels above.
}

}  // namespace

void forward_tc(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, bf* out, float* lse) {
  HERD_CHECK(p.d % 16 == 0 && p.d >= 16 && p.d <= kMaxHeadDim, "tensor-core attention: head_dim ", p.d);
  if (p.tq == 0) return;
  with_nf(p.d, [&]<int NF>() { forward_launch<NF>(p, batch, q, k, v, out, lse); });
}

void delta_tc(const Params& p, std::int64_t batch, const bf* out, const float* dout, float* delta) {
  const std::int64_t rows = batch * p.tq * p.q_heads;
  mark_part(AttentionPart::kDelta);
  tc_delta_kernel<<<grid_for(rows, kBwdThreads / 32, 65535), kBwdThreads, 0, stream()>>>(p, rows, out, dout, delta);
  HERD_CUDA_LAUNCHED("attention_backward delta (tensor cores)");
}

void backward_tc(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, const bf* out,
                 const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  HERD_CHECK(p.d % 16 == 0 && p.d >= 16 && p.d <= kMaxHeadDim, "tensor-core attention: head_dim ", p.d);
  with_nf(p.d, [&]<int NF>() { backward_launch<NF>(p, batch, q, k, v, out, lse, dout, dq, dk, dv); });
}

}  // namespace attn
}  // namespace herd::kernels::cuda
