// Tensor-core flash attention on inline-PTX mma.sync with register-resident accumulators, for bf16 q,
// k, v (kernels/attention.h). Taken by the bf16 calls with head_dim D a multiple of 16 up to 128 while
// set_attention_kernels names kMma (kernels.h). Same contract, numerics and masking as the WMMA kernels
// of attention_tc.cu (whose header states the recipe; the mask and tile-skipping rules:
// attention_common.cuh): S = Q K^T in fp32 times scale in fp32; softmax statistics in fp32 (l sums the
// unrounded P); P rounded to bf16 only for P V; backward with dO rounded to bf16 when staged, delta =
// rowsum(bf16(dO) out) (attention_tc.cu's delta kernel), dS = P (dP - delta) in fp32, bf16(P) for dV
// and bf16(scale dS) for dK and dQ. Only the summation order and the exponential (exp_e below: exp2f
// instead of expf) differ from attention_tc.cu.
//
// Products: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (D = A B + C, A 16 x 16 row-major, B
// 16 x 8 "col" = given by columns, fp32 C / D). Fragment layouts (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"; g = lane / 4 (groupID), t = lane % 4 (threadID_in_group);
// two bf16 per .b32 register, the lower-indexed element in the lower 16 bits):
//   A (4 regs, a0..a7)   a0,a1: row g,     cols 2t, 2t+1      a2,a3: row g + 8, cols 2t, 2t+1
//                        a4,a5: row g,     cols 2t+8, 2t+9    a6,a7: row g + 8, cols 2t+8, 2t+9
//   B (2 regs, b0..b3)   b0,b1: k rows 2t, 2t+1, column g     b2,b3: k rows 2t+8, 2t+9, column g
//   C / D (4 fp32)       c0,c1: row g, cols 2t, 2t+1          c2,c3: row g + 8, cols 2t, 2t+1
// So the C fragments of two adjacent 16 x 8 blocks (columns 0..7: Cl, 8..15: Ch), packed to bf16x2 as
// {Cl.c0,c1}, {Cl.c2,c3}, {Ch.c0,c1}, {Ch.c2,c3}, are exactly the A fragment of the 16 x 16 block
// (a0a1 = row g cols 2t..; a2a3 = row g+8 cols 2t..; a4a5 = row g cols 8+2t..; a6a7 = row g+8 cols
// 8+2t..): P (forward), dS (dQ pass), P^T and dS^T (dK / dV pass) never leave the registers.
// Operands in shared memory are read with ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (ldsm_x4
// below): lanes 8i..8i+7 give the row addresses of 8 x 8 matrix i, and register i returns matrix i
// with lane l holding (row l/4, cols 2(l%4), 2(l%4)+1), or with .trans (rows 2(l%4), 2(l%4)+1 of
// column l/4). ldsm_x4 at the 16 x 16 block (r0, c0) of a row-major tile addresses the matrices
//   0: rows r0..r0+7, cols c0..c0+7      1: rows r0+8..r0+15, cols c0..c0+7
//   2: rows r0..r0+7, cols c0+8..c0+15   3: rows r0+8..r0+15, cols c0+8..c0+15
// which gives, with g, t as above:
//   plain, as A (the block is the A operand):     {r0, r1, r2, r3} = {a0a1, a2a3, a4a5, a6a7}.
//   plain, as B of X^T (rows r0.. of X are the n columns of B, cols c0.. its k rows; S = Q K^T's K):
//     B[k][n] = X[r0 + n][c0 + k], so b0b1 = X[r0 + g][c0 + 2t..] is matrix 0 for the n-block r0..r0+7
//     and b2b3 = X[r0 + g][c0 + 8 + 2t..] matrix 2; the n-block r0+8.. takes matrices 1 and 3.
//   .trans, as B of X (rows r0.. of X are k, cols c0.. are n; P V's V): B[k][n] = X[r0 + k][c0 + n],
//     b0b1 = X[r0 + 2t..][c0 + g] is matrix 0 transposed for the n-block c0..c0+7, b2b3 matrix 1; the
//     n-block c0+8.. takes matrices 2 and 3.
// bf16 tiles in shared memory have rows of D + 8 elements (2D + 16 bytes: every row address 16-byte
// aligned as ldmatrix needs; D / 2 + 4 words per row puts the 8 rows of a matrix 4 (2m + 1) words
// apart, m = D / 16, so the 8 rows x 16 bytes cover all 32 banks once: no bank conflicts).
//
// Kernels (64 x 64 tiles, 128 threads = 4 warps; warp w owns rows 16w..16w+15 of the block's tile):
//   forward   grid (Hq, ceil(Tq/64), B), query tile ceil(Tq/64) - 1 - blockIdx.y: heads vary fastest and
//             the last query tiles (the most keys to see under the causal mask) are dispatched first,
//             so the long blocks do not trail. The warp's Q A-fragments stay in registers; per key tile
//             S (16 x 64: 8 C fragments), the online softmax on the C layout (a lane holds rows g and
//             g + 8; the row max and sum reduce over the quad with shuffles xor 1 and 2), P packed into
//             A fragments, O (16 x D: D / 8 C fragments) += P V. out = O / l, lse = m + log l.
//   dq        grid as the forward; per key tile S = Q K^T and dP = dO V^T (8 C fragments each), dS in
//             registers, dQ (16 x D) += dS K. Written once at the end (fp32 overwrite).
//   dkdv      grid (Hkv, ceil(Tk/64), B) (the first key tiles, which see the most queries, first); warp
//             w owns keys 16w..16w+15, over the group's query heads and their query tiles: S^T = K Q^T
//             and dP^T = V dO^T (16 keys x 64 queries), P^T and dS^T in registers (lse and delta
//             indexed by column), dV += P^T dO and dK += dS^T Q. When that grid is small (under four
//             blocks per SM) and the group larger than 1, one block per query head instead (grid (Hq,
//             ...)), each head's share into fp32 partials that a second kernel sums over the group in
//             head order (deterministic; 2 B Tk Hq D floats of scratch from the caching allocator).
// Shared memory (dynamic, bf16 tiles of 64 rows x (D + 8)): forward Q, K, V 27 KiB at D = 64 / 51 KiB
// at D = 128; dq Q, dO, K, V and dkdv K, V, Q, dO 36 / 68 KiB. Registers (ptxas, sm_90, D = 64 / 128):
// forward 128 / 212 (at D <= 64 held to 128 by __launch_bounds__ for 4 blocks per SM; 8 bytes spilled),
// dq 162 / 202, dkdv 224 / 255 (no spills at D = 64 or 128; a few dozen bytes at D = 112).
// Masking and skipping: a tile no pair can see is skipped by the whole block (as attention_tc.cu); in
// addition a warp skips a tile none of its rows' pairs can see, and skips the element-wise mask when
// every pair of its 16 rows x the tile is visible (all valid, one document, all key positions at or
// before all query positions).
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "herd/kernels/cuda/attention_common.cuh"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda::attn {
namespace {

using bf = __nv_bfloat16;

constexpr int kTile = 64;  // query rows and keys per tile
constexpr int kThreads = 128;
constexpr unsigned kFull = 0xffffffffu;

// ldmatrix x4 of the 16 x 16 bf16 block at `blk` (a shared-memory tile of row stride ld elements): lane
// l gives the address of row (l & 7) + 8 ((l >> 3) & 1), column 8 (l >> 4) (matrix l / 8, as listed
// above). Registers r[i] = matrix i (kTrans: transposed).
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(std::uint32_t (&r)[4], const bf* blk, int ld) {
  const int l = threadIdx.x & 31;
  const bf* row = blk + ((l & 7) + 8 * ((l >> 3) & 1)) * ld + 8 * (l >> 4);
  const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  }
}

// c += a b (one m16n8k16 product; fragment layouts above).
__device__ __forceinline__ void mma16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values rounded to bf16 (nearest even) in one register: lo in the lower 16 bits.
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (low half), .y = hi
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

// The A fragment of the 16 x 16 block made of the C fragments c[2kk] (columns 16kk..16kk+7) and
// c[2kk+1] (columns 16kk+8..16kk+15), rounded to bf16 (layouts above: a0a1 = lo.c0c1, a2a3 = lo.c2c3,
// a4a5 = hi.c0c1, a6a7 = hi.c2c3).
__device__ __forceinline__ void c_to_a(std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// acc (16 rows x 64: 8 C fragments) += A B^T for the warp's A rows (16 x D at `a`, stride ld) and the
// 64 rows of `b` (64 x D, stride ld): S = Q K^T, dP = dO V^T, S^T = K Q^T, dP^T = V dO^T.
template <int NF>
__device__ __forceinline__ void rows_times_tile_t(float (&acc)[8][4], const bf* a, const bf* b, int ld) {
#pragma unroll
  for (int kk = 0; kk < NF; ++kk) {
    std::uint32_t af[4];
    ldsm_x4<false>(af, a + 16 * kk, ld);
#pragma unroll
    for (int jp = 0; jp < kTile / 16; ++jp) {
      std::uint32_t bfr[4];
      ldsm_x4<false>(bfr, b + (16 * jp) * ld + 16 * kk, ld);
      mma16816(acc[2 * jp], af, bfr[0], bfr[2]);
      mma16816(acc[2 * jp + 1], af, bfr[1], bfr[3]);
    }
  }
}

// out (16 x D: 2 NF C fragments) += X (16 x 64, the C fragments x, rounded to bf16) times the tile
// `b` (64 x D, stride ld): O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q.
template <int NF>
__device__ __forceinline__ void frags_times_tile(float (&out)[2 * NF][4], const float (&x)[8][4], const bf* b, int ld) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    std::uint32_t af[4];
    c_to_a(af, x[2 * kk], x[2 * kk + 1]);
#pragma unroll
    for (int np = 0; np < NF; ++np) {
      std::uint32_t bfr[4];
      ldsm_x4<true>(bfr, b + (16 * kk) * ld + 16 * np, ld);
      mma16816(out[2 * np], af, bfr[0], bfr[1]);
      mma16816(out[2 * np + 1], af, bfr[2], bfr[3]);
    }
  }
}

// e^x as 2^(x log2 e): exp2f is the hardware ex2 (with its subnormal handling), a few instructions
// fewer than expf's range reduction. The rounding of x log2 e costs ~(1 + |x|) 1e-7 relative, and the
// arguments here are x <= 0 (up to rounding) where e^x matters only for |x| of a few tens: far inside
// the bf16 roundings that follow (2^-8).
__device__ __forceinline__ float exp_e(float x) { return exp2f(x * 1.4426950408889634f); }

// The position / document span of rows first..first+n-1 of a staged mask (n <= 64; n <= 0: the empty
// span, min INT_MAX and max INT_MIN), the same in every lane of the warp.
struct Span {
  int pos_min, pos_max, doc_min, doc_max;
};
__device__ __forceinline__ Span warp_span(const int* pos_s, const int* doc_s, int first, int n) {
  const int lane = threadIdx.x & 31;
  int pmin = INT_MAX, pmax = INT_MIN, dmin = INT_MAX, dmax = INT_MIN;
  for (int i = lane; i < n; i += 32) {
    pmin = min(pmin, pos_s[first + i]);
    pmax = max(pmax, pos_s[first + i]);
    dmin = min(dmin, doc_s[first + i]);
    dmax = max(dmax, doc_s[first + i]);
  }
  return {__reduce_min_sync(kFull, pmin), __reduce_max_sync(kFull, pmax), __reduce_min_sync(kFull, dmin),
          __reduce_max_sync(kFull, dmax)};
}
// The positions and document ids of one tile, read into registers a tile ahead (threads < 64, one
// token each; 0 past the end, as stage_mask leaves them) and staged into shared memory when the tile
// comes up, so the global load's latency hides behind the previous tile's work.
struct MaskAhead {
  int pos = 0, doc = 0;
  // Tokens first..first+63 of the sequence (pos_g, doc_g: its first token; doc_g null: one document).
  __device__ __forceinline__ void load(const std::int32_t* pos_g, const std::int32_t* doc_g, std::int64_t first,
                                       std::int64_t total) {
    const int t = threadIdx.x;
    pos = 0;
    doc = 0;
    if (t < kTile && first + t < total) {
      pos = pos_g[first + t];
      doc = doc_g ? doc_g[first + t] : 0;
    }
  }
  __device__ __forceinline__ void store(int* pos_s, int* doc_s) const {
    const int t = threadIdx.x;
    if (t < kTile) {
      pos_s[t] = pos;
      doc_s[t] = doc;
    }
  }
};

// No query of qs sees a key of ks.
__device__ __forceinline__ bool none_visible(const Span& qs, const Span& ks) {
  return ks.pos_min > qs.pos_max || ks.doc_max < qs.doc_min || ks.doc_min > qs.doc_max;
}
// Every query of qs sees every key of ks (both non-empty).
__device__ __forceinline__ bool all_visible(const Span& qs, const Span& ks) {
  return ks.pos_max <= qs.pos_min && ks.doc_min == ks.doc_max && qs.doc_min == qs.doc_max && ks.doc_min == qs.doc_min;
}

template <int NF>
__global__ void __launch_bounds__(kThreads, NF <= 4 ? 4 : 1)  // D <= 64: 4 blocks of 128 registers per SM
    mma_forward_kernel(Params p, const bf* __restrict__ q, const bf* __restrict__ k, const bf* __restrict__ v,
                       bf* __restrict__ out, float* __restrict__ lse) {
  constexpr int D = NF * 16, kLdX = D + 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int pq_s[kTile], dq_s[kTile], pk_s[kTile], dk_s[kTile], span[4];
  bf* qs = reinterpret_cast<bf*>(smem_raw);
  bf* ks = qs + kTile * kLdX;
  bf* vs = ks + kTile * kLdX;
  const int b = blockIdx.z, h = blockIdx.x, hk = h / p.group;
  const std::int64_t q0 = static_cast<std::int64_t>(gridDim.y - 1 - blockIdx.y) * kTile;
  const int qn = static_cast<int>(p.tq - q0 < kTile ? p.tq - q0 : kTile);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp;            // the warp's first query row
  const int ra = r0 + g, rb = ra + 8;  // this lane's two rows (C fragment elements 0,1 and 2,3)
  const int wn = min(16, qn - r0);     // the warp's valid rows (<= 0: none)
  const std::int64_t kv_off = static_cast<std::int64_t>(hk) * D;

  stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kTile);
  stage_bf16<kThreads, kTile>(qs, kLdX, q + (b * p.tq + q0) * p.ld_q + static_cast<std::int64_t>(h) * D, p.ld_q, qn, D);
  __syncthreads();
  tile_span(pq_s, dq_s, qn, span);
  const int q_pos_max = span[1], q_doc_min = span[2], q_doc_max = span[3];
  const Span wq = warp_span(pq_s, dq_s, r0, wn);
  std::uint32_t qa[NF][4];  // the warp's Q rows as A fragments (16 x D)
#pragma unroll
  for (int kk = 0; kk < NF; ++kk) ldsm_x4<false>(qa[kk], qs + r0 * kLdX + 16 * kk, kLdX);

  float o[2 * NF][4];  // running output, 16 x D
#pragma unroll
  for (int n = 0; n < 2 * NF; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;  // rows ra, rb (the quad holds them alike)

  const std::int32_t* pos_k = p.pos_k + b * p.tk;
  const std::int32_t* doc_k = p.doc_k ? p.doc_k + b * p.tk : nullptr;
  MaskAhead ahead;
  ahead.load(pos_k, doc_k, 0, p.tk);
  for (std::int64_t k0 = 0; k0 < p.tk; k0 += kTile) {
    const int kn = static_cast<int>(p.tk - k0 < kTile ? p.tk - k0 : kTile);
    __syncthreads();  // the previous tile's K, V and mask are no longer read
    ahead.store(pk_s, dk_s);
    ahead.load(pos_k, doc_k, k0 + kTile, p.tk);
    __syncthreads();
    const int tid = threadIdx.x;
    const bool maybe = tid < kn && pk_s[tid] <= q_pos_max && dk_s[tid] >= q_doc_min && dk_s[tid] <= q_doc_max;
    if (!__syncthreads_or(maybe)) continue;  // no pair of this tile is visible (uniform across the block)
    stage_bf16<kThreads, kTile>(ks, kLdX, k + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, kn, D);
    stage_bf16<kThreads, kTile>(vs, kLdX, v + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, kn, D);
    __syncthreads();
    const Span wk = warp_span(pk_s, dk_s, 0, kn);
    if (wn <= 0 || none_visible(wq, wk)) continue;  // nothing for this warp (warp-uniform)
    const bool full = wn == 16 && kn == kTile && all_visible(wq, wk);

    float s[8][4];  // S = Q K^T, 16 x 64: fragment j holds keys 8j..8j+7
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < NF; ++kk)
#pragma unroll
      for (int jp = 0; jp < kTile / 16; ++jp) {
        std::uint32_t kb[4];
        ldsm_x4<false>(kb, ks + (16 * jp) * kLdX + 16 * kk, kLdX);
        mma16816(s[2 * jp], qa[kk], kb[0], kb[2]);
        mma16816(s[2 * jp + 1], qa[kk], kb[1], kb[3]);
      }

    // Scale and mask (element e of fragment j: row e < 2 ? ra : rb, key 8j + 2t + (e & 1)); row maxima.
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[j][e] * p.scale;
        if (!full && !visible(e < 2 ? ra : rb, 8 * j + 2 * t + (e & 1), qn, kn, pq_s, dq_s, pk_s, dk_s)) x = -INFINITY;
        s[j][e] = x;
        if (e < 2) {
          mx_a = fmaxf(mx_a, x);
        } else {
          mx_b = fmaxf(mx_b, x);
        }
      }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(kFull, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(kFull, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(kFull, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(kFull, mx_b, 2));
    const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
    const float alpha_a = m_a == -INFINITY ? 0.0f : exp_e(m_a - mn_a);
    const float alpha_b = m_b == -INFINITY ? 0.0f : exp_e(m_b - mn_b);
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = s[j][e];
        const float pij = x == -INFINITY ? 0.0f : exp_e(x - (e < 2 ? mn_a : mn_b));
        s[j][e] = pij;  // unrounded: l sums it; rounded to bf16 when packed for P V
        if (e < 2) {
          sum_a += pij;
        } else {
          sum_b += pij;
        }
      }
    sum_a += __shfl_xor_sync(kFull, sum_a, 1);
    sum_a += __shfl_xor_sync(kFull, sum_a, 2);
    sum_b += __shfl_xor_sync(kFull, sum_b, 1);
    sum_b += __shfl_xor_sync(kFull, sum_b, 2);
    l_a = l_a * alpha_a + sum_a;
    l_b = l_b * alpha_b + sum_b;
    m_a = mn_a;
    m_b = mn_b;
#pragma unroll
    for (int n = 0; n < 2 * NF; ++n) {
      o[n][0] *= alpha_a;
      o[n][1] *= alpha_a;
      o[n][2] *= alpha_b;
      o[n][3] *= alpha_b;
    }
    frags_times_tile<NF>(o, s, vs, kLdX);  // O += bf16(P) V
  }

  // out = O / l (0 for a row that saw no key), lse = m + log l (-inf there). Fragment n holds columns
  // 8n + 2t, 8n + 2t + 1 of rows ra (elements 0, 1) and rb (2, 3).
  const float inv_a = l_a > 0.0f ? 1.0f / l_a : 0.0f, inv_b = l_b > 0.0f ? 1.0f / l_b : 0.0f;
  bf* out_a = out + (b * p.tq + q0 + ra) * p.ld_o + static_cast<std::int64_t>(h) * D + 2 * t;
  bf* out_b = out + (b * p.tq + q0 + rb) * p.ld_o + static_cast<std::int64_t>(h) * D + 2 * t;
#pragma unroll
  for (int n = 0; n < 2 * NF; ++n) {
    if (ra < qn) {
      out_a[8 * n] = narrow_bf16(o[n][0] * inv_a);
      out_a[8 * n + 1] = narrow_bf16(o[n][1] * inv_a);
    }
    if (rb < qn) {
      out_b[8 * n] = narrow_bf16(o[n][2] * inv_b);
      out_b[8 * n + 1] = narrow_bf16(o[n][3] * inv_b);
    }
  }
  if (t == 0) {
    float* lse_row = lse + (static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq + q0;
    if (ra < qn) lse_row[ra] = l_a > 0.0f ? m_a + logf(l_a) : -INFINITY;
    if (rb < qn) lse_row[rb] = l_b > 0.0f ? m_b + logf(l_b) : -INFINITY;
  }
}

// The 16 x D fp32 accumulator fragments of one warp (rows r0 + g and r0 + g + 8 of a tile starting at
// global row `dst`, token stride ld) to global memory, rows < valid (overwrite).
template <int NF>
__device__ __forceinline__ void write_acc(float* dst, std::int64_t ld, const float (&acc)[2 * NF][4], int r0,
                                          int valid) {
  const int lane = threadIdx.x & 31, ra = r0 + (lane >> 2), rb = ra + 8, c = 2 * (lane & 3);
  float* da = dst + ra * ld + c;
  float* db = dst + rb * ld + c;
#pragma unroll
  for (int n = 0; n < 2 * NF; ++n) {
    if (ra < valid) {
      da[8 * n] = acc[n][0];
      da[8 * n + 1] = acc[n][1];
    }
    if (rb < valid) {
      db[8 * n] = acc[n][2];
      db[8 * n + 1] = acc[n][3];
    }
  }
}

template <int NF>
__global__ void __launch_bounds__(kThreads)
    mma_dq_kernel(Params p, const bf* __restrict__ q, const bf* __restrict__ k, const bf* __restrict__ v,
                  const float* __restrict__ lse, const float* __restrict__ delta, const float* __restrict__ dout,
                  float* __restrict__ dq) {
  constexpr int D = NF * 16, kLdX = D + 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int pq_s[kTile], dq_s[kTile], pk_s[kTile], dk_s[kTile], span[4];
  __shared__ float lse_s[kTile], delta_s[kTile];
  bf* qs = reinterpret_cast<bf*>(smem_raw);
  bf* dos = qs + kTile * kLdX;
  bf* ks = dos + kTile * kLdX;
  bf* vs = ks + kTile * kLdX;
  const int b = blockIdx.z, h = blockIdx.x, hk = h / p.group;
  const std::int64_t q0 = static_cast<std::int64_t>(gridDim.y - 1 - blockIdx.y) * kTile;
  const int qn = static_cast<int>(p.tq - q0 < kTile ? p.tq - q0 : kTile);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp, ra = r0 + g, rb = ra + 8, wn = min(16, qn - r0);
  const std::int64_t q_off = static_cast<std::int64_t>(h) * D, kv_off = static_cast<std::int64_t>(hk) * D;
  const std::int64_t stat_row = (static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq;

  stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kTile);
  stage_bf16<kThreads, kTile>(qs, kLdX, q + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, qn, D);
  stage_dout<kThreads, kTile>(dos, kLdX, dout + (b * p.tq + q0) * p.ld_o + q_off, p.ld_o, qn, D);
  stage_row_stats(lse_s, delta_s, lse + stat_row + q0, delta + stat_row + q0, qn, kTile);
  __syncthreads();
  tile_span(pq_s, dq_s, qn, span);
  const int q_pos_max = span[1], q_doc_min = span[2], q_doc_max = span[3];
  const Span wq = warp_span(pq_s, dq_s, r0, wn);
  const float lse_a = lse_s[ra], lse_b = lse_s[rb], delta_a = delta_s[ra], delta_b = delta_s[rb];

  float acc[2 * NF][4];  // dQ, 16 x D
#pragma unroll
  for (int n = 0; n < 2 * NF; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;

  const std::int32_t* pos_k = p.pos_k + b * p.tk;
  const std::int32_t* doc_k = p.doc_k ? p.doc_k + b * p.tk : nullptr;
  MaskAhead ahead;
  ahead.load(pos_k, doc_k, 0, p.tk);
  for (std::int64_t k0 = 0; k0 < p.tk; k0 += kTile) {
    const int kn = static_cast<int>(p.tk - k0 < kTile ? p.tk - k0 : kTile);
    __syncthreads();  // the previous key tile's K, V and mask are no longer read
    ahead.store(pk_s, dk_s);
    ahead.load(pos_k, doc_k, k0 + kTile, p.tk);
    __syncthreads();
    const int tid = threadIdx.x;
    const bool maybe = tid < kn && pk_s[tid] <= q_pos_max && dk_s[tid] >= q_doc_min && dk_s[tid] <= q_doc_max;
    if (!__syncthreads_or(maybe)) continue;
    stage_bf16<kThreads, kTile>(ks, kLdX, k + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, kn, D);
    stage_bf16<kThreads, kTile>(vs, kLdX, v + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, kn, D);
    __syncthreads();
    const Span wk = warp_span(pk_s, dk_s, 0, kn);
    if (wn <= 0 || none_visible(wq, wk)) continue;
    const bool full = wn == 16 && kn == kTile && all_visible(wq, wk);

    float s[8][4], dp[8][4];  // S = Q K^T and dP = dO V^T, fragment j: keys 8j..8j+7
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
    rows_times_tile_t<NF>(s, qs + r0 * kLdX, ks, kLdX);
    rows_times_tile_t<NF>(dp, dos + r0 * kLdX, vs, kLdX);
    // P = exp(S scale - lse) where visible and the row saw a key, else 0; dS = P (dP - delta) scale
    // (into dp; rounded to bf16 when packed for dS K).
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float li = e < 2 ? lse_a : lse_b, di = e < 2 ? delta_a : delta_b;
        const bool vis = li != -INFINITY &&
                         (full || visible(e < 2 ? ra : rb, 8 * j + 2 * t + (e & 1), qn, kn, pq_s, dq_s, pk_s, dk_s));
        const float pij = vis ? exp_e(s[j][e] * p.scale - li) : 0.0f;
        dp[j][e] = pij * (dp[j][e] - di) * p.scale;
      }
    frags_times_tile<NF>(acc, dp, ks, kLdX);  // dQ += bf16(scale dS) K
  }
  write_acc<NF>(dq + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, acc, r0, qn);
}

template <int NF>
__global__ void __launch_bounds__(kThreads)
    mma_dkdv_kernel(Params p, const bf* __restrict__ q, const bf* __restrict__ k, const bf* __restrict__ v,
                    const float* __restrict__ lse, const float* __restrict__ delta, const float* __restrict__ dout,
                    float* __restrict__ dk, float* __restrict__ dv, std::int64_t ld_out, bool per_head) {
  constexpr int D = NF * 16, kLdX = D + 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int pq_s[kTile], dq_s[kTile], pk_s[kTile], dk_s[kTile], span[4];
  __shared__ float lse_s[kTile], delta_s[kTile];
  bf* ks = reinterpret_cast<bf*>(smem_raw);
  bf* vs = ks + kTile * kLdX;
  bf* qs = vs + kTile * kLdX;
  bf* dos = qs + kTile * kLdX;
  // per_head: block x is query head h (of KV head h / group), whose share of dK / dV goes to the
  // partial buffers dk, dv (rows of stride ld_out, head h at column h D). Otherwise block x is the KV
  // head, summing its whole group into dk, dv (the caller's, token strides ld_k, ld_v).
  const int b = blockIdx.z, hk = per_head ? blockIdx.x / p.group : blockIdx.x;
  const int g_first = per_head ? blockIdx.x - hk * p.group : 0, g_end = per_head ? g_first + 1 : p.group;
  const std::int64_t k0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const int kn = static_cast<int>(p.tk - k0 < kTile ? p.tk - k0 : kTile);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp, ka = r0 + g, kb = ka + 8, wn = min(16, kn - r0);  // the warp's keys
  const std::int64_t kv_off = static_cast<std::int64_t>(hk) * D;

  stage_mask(pk_s, dk_s, p.pos_k + b * p.tk + k0, p.doc_k ? p.doc_k + b * p.tk + k0 : nullptr, kn, kTile);
  stage_bf16<kThreads, kTile>(ks, kLdX, k + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, kn, D);
  stage_bf16<kThreads, kTile>(vs, kLdX, v + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, kn, D);
  __syncthreads();
  tile_span(pk_s, dk_s, kn, span);
  const int k_pos_min = span[0], k_doc_min = span[2], k_doc_max = span[3];
  const Span wk = warp_span(pk_s, dk_s, r0, wn);

  float dka[2 * NF][4], dva[2 * NF][4];  // dK and dV of the warp's 16 keys, 16 x D each
#pragma unroll
  for (int n = 0; n < 2 * NF; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dka[n][e] = dva[n][e] = 0.0f;

  // Query tiles come in the order (head, tile); a tile's mask does not depend on the head, so the one
  // after the last tile of a head is tile 0 again.
  const std::int32_t* pos_q = p.pos_q + b * p.tq;
  const std::int32_t* doc_q = p.doc_q ? p.doc_q + b * p.tq : nullptr;
  MaskAhead ahead;
  ahead.load(pos_q, doc_q, 0, p.tq);
  for (int gi = g_first; gi < g_end; ++gi) {
    const int h = hk * p.group + gi;
    const std::int64_t q_off = static_cast<std::int64_t>(h) * D;
    const std::int64_t stat_row = (static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq;
    for (std::int64_t q0 = 0; q0 < p.tq; q0 += kTile) {
      const int qn = static_cast<int>(p.tq - q0 < kTile ? p.tq - q0 : kTile);
      __syncthreads();  // the previous query tile's Q, dO, statistics and mask are no longer read
      ahead.store(pq_s, dq_s);
      ahead.load(pos_q, doc_q, q0 + kTile < p.tq ? q0 + kTile : 0, p.tq);
      __syncthreads();
      const int tid = threadIdx.x;
      const bool maybe = tid < qn && pq_s[tid] >= k_pos_min && dq_s[tid] >= k_doc_min && dq_s[tid] <= k_doc_max;
      if (!__syncthreads_or(maybe)) continue;
      stage_bf16<kThreads, kTile>(qs, kLdX, q + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, qn, D);
      stage_dout<kThreads, kTile>(dos, kLdX, dout + (b * p.tq + q0) * p.ld_o + q_off, p.ld_o, qn, D);
      stage_row_stats(lse_s, delta_s, lse + stat_row + q0, delta + stat_row + q0, qn, kTile);
      __syncthreads();
      const Span wq = warp_span(pq_s, dq_s, 0, qn);
      if (wn <= 0 || none_visible(wq, wk)) continue;
      const bool full = wn == 16 && qn == kTile && all_visible(wq, wk);

      // S^T = K Q^T (16 keys x 64 queries; fragment j: queries 8j..8j+7, element e: key e < 2 ? ka : kb,
      // query 8j + 2t + (e & 1)), then P^T = exp(S^T scale - lse[query]) where visible, else 0.
      float s[8][4];
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
      rows_times_tile_t<NF>(s, ks + r0 * kLdX, qs, kLdX);
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = 8 * j + 2 * t + (e & 1);
          const float li = lse_s[qc];
          const bool vis = li != -INFINITY && (full || visible(qc, e < 2 ? ka : kb, qn, kn, pq_s, dq_s, pk_s, dk_s));
          s[j][e] = vis ? exp_e(s[j][e] * p.scale - li) : 0.0f;
        }
      frags_times_tile<NF>(dva, s, dos, kLdX);  // dV += bf16(P^T) dO

      // dP^T = V dO^T, then dS^T = P^T (dP^T - delta[query]) scale (from the unrounded P^T).
      float dp[8][4];
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[j][e] = 0.0f;
      rows_times_tile_t<NF>(dp, vs + r0 * kLdX, dos, kLdX);
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[j][e] = s[j][e] * (dp[j][e] - delta_s[8 * j + 2 * t + (e & 1)]) * p.scale;
      frags_times_tile<NF>(dka, dp, qs, kLdX);  // dK += bf16(scale dS^T) Q
    }
  }
  if (per_head) {
    const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * D;
    write_acc<NF>(dk + (b * p.tk + k0) * ld_out + col, ld_out, dka, r0, kn);
    write_acc<NF>(dv + (b * p.tk + k0) * ld_out + col, ld_out, dva, r0, kn);
  } else {
    write_acc<NF>(dk + (b * p.tk + k0) * p.ld_k + kv_off, p.ld_k, dka, r0, kn);
    write_acc<NF>(dv + (b * p.tk + k0) * p.ld_v + kv_off, p.ld_v, dva, r0, kn);
  }
}

// dk and dv of every key from the per-query-head partials (rows of q_heads * D floats): the sum over the
// group's heads in head order (deterministic), written with the caller's strides (overwrite).
__global__ void __launch_bounds__(256)
    mma_group_sum_kernel(Params p, std::int64_t rows, const float* __restrict__ part_k,
                         const float* __restrict__ part_v, float* __restrict__ dk, float* __restrict__ dv) {
  const std::int64_t kd = static_cast<std::int64_t>(p.kv_heads) * p.d, qd = static_cast<std::int64_t>(p.q_heads) * p.d;
  const std::int64_t n = rows * kd, stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const std::int64_t row = i / kd, j = i - row * kd;  // j = hk D + c
    const std::int64_t hk = j / p.d, c = j - hk * p.d;
    const float* pk = part_k + row * qd + hk * p.group * p.d + c;
    const float* pv = part_v + row * qd + hk * p.group * p.d + c;
    float sk = 0.0f, sv = 0.0f;
    for (int gi = 0; gi < p.group; ++gi) {
      sk += pk[gi * p.d];
      sv += pv[gi * p.d];
    }
    dk[row * p.ld_k + j] = sk;
    dv[row * p.ld_v + j] = sv;
  }
}

// The device's multiprocessor count (the current device; a cheap attribute query).
int sm_count() {
  int dev = 0, n = 0;
  HERD_CUDA(cudaGetDevice(&dev));
  HERD_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

constexpr std::size_t tiles_smem(int tiles, int d) {
  return static_cast<std::size_t>(tiles) * sizeof(bf) * kTile * static_cast<std::size_t>(d + 8);
}
static_assert(tiles_smem(4, kMaxHeadDim) <= 227 * 1024, "mma attention tiles exceed sm_90's shared memory");

template <int NF>
void forward_launch(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, bf* out, float* lse) {
  const std::size_t smem = tiles_smem(3, NF * 16);
  allow_smem(mma_forward_kernel<NF>, smem);
  const dim3 grid(static_cast<unsigned>(p.q_heads), tiles_of(p.tq, kTile), static_cast<unsigned>(batch));
  mark_part(AttentionPart::kForward);
  mma_forward_kernel<NF><<<grid, kThreads, smem, stream()>>>(p, q, k, v, out, lse);
  HERD_CUDA_LAUNCHED("attention_forward (mma)");
}

// The dK / dV pass: one block per (key tile, KV head) summing the group's query heads when the group
// is 1 or that grid alone fills the GPU; otherwise one block per (key tile, query head), so that the
// causal imbalance (the first key tile sees every query tile, the last one only its own) is spread over group times
// as many blocks, each head's share into fp32 partials (2 B Tk Hq D floats) summed in head order after.
template <int NF>
void dkdv_launch(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, const float* lse,
                 const float* delta, const float* dout, float* dk, float* dv) {
  const std::size_t smem = tiles_smem(4, NF * 16);
  allow_smem(mma_dkdv_kernel<NF>, smem);
  const unsigned tiles = tiles_of(p.tk, kTile);
  const std::int64_t kv_blocks = static_cast<std::int64_t>(tiles) * p.kv_heads * batch;
  if (p.group == 1 || p.tq == 0 || kv_blocks >= 4 * static_cast<std::int64_t>(sm_count())) {
    const dim3 grid(static_cast<unsigned>(p.kv_heads), tiles, static_cast<unsigned>(batch));
    mark_part(AttentionPart::kDkdv);
    mma_dkdv_kernel<NF><<<grid, kThreads, smem, stream()>>>(p, q, k, v, lse, delta, dout, dk, dv, 0, false);
    HERD_CUDA_LAUNCHED("attention_backward dk dv (mma)");
    return;
  }
  const std::int64_t rows = batch * p.tk, ld_part = static_cast<std::int64_t>(p.q_heads) * p.d;
  DeviceBuffer<float> part_k(rows * ld_part), part_v(rows * ld_part);
  const dim3 grid(static_cast<unsigned>(p.q_heads), tiles, static_cast<unsigned>(batch));
  mark_part(AttentionPart::kDkdv);
  mma_dkdv_kernel<NF>
      <<<grid, kThreads, smem, stream()>>>(p, q, k, v, lse, delta, dout, part_k.data(), part_v.data(), ld_part, true);
  HERD_CUDA_LAUNCHED("attention_backward dk dv per query head (mma)");
  mark_part(AttentionPart::kGroupSum);
  mma_group_sum_kernel<<<grid_for(rows * p.kv_heads * p.d, 256), 256, 0, stream()>>>(p, rows, part_k.data(),
                                                                                     part_v.data(), dk, dv);
  HERD_CUDA_LAUNCHED("attention_backward dk dv group sum (mma)");
  // The partials return to the caching allocator, reused on this stream only after the kernels above.
}

template <int NF>
void backward_launch(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, const bf* out,
                     const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  if (p.tq == 0) {  // no query: dk and dv are zero (the kernel finds no query tile)
    if (p.tk > 0) dkdv_launch<NF>(p, batch, q, k, v, lse, nullptr, dout, dk, dv);
    return;
  }
  DeviceBuffer<float> delta(batch * p.tq * p.q_heads);
  delta_tc(p, batch, out, dout, delta.data());
  if (p.tk > 0) dkdv_launch<NF>(p, batch, q, k, v, lse, delta.data(), dout, dk, dv);
  const std::size_t smem = tiles_smem(4, NF * 16);
  allow_smem(mma_dq_kernel<NF>, smem);
  const dim3 q_grid(static_cast<unsigned>(p.q_heads), tiles_of(p.tq, kTile), static_cast<unsigned>(batch));
  mark_part(AttentionPart::kDq);
  mma_dq_kernel<NF><<<q_grid, kThreads, smem, stream()>>>(p, q, k, v, lse, delta.data(), dout, dq);
  HERD_CUDA_LAUNCHED("attention_backward dq (mma)");
  // `delta` returns to the caching allocator, reused on this stream only after the kernels above.
}

}  // namespace

void forward_mma(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, bf* out, float* lse) {
  HERD_CHECK(p.d % 16 == 0 && p.d >= 16 && p.d <= kMaxHeadDim, "mma attention: head_dim ", p.d);
  HERD_CHECK(tiles_of(p.tq, kTile) <= 65535, "mma attention grid: at most 65535 query tiles");
  if (p.tq == 0) return;
  with_nf(p.d, [&]<int NF>() { forward_launch<NF>(p, batch, q, k, v, out, lse); });
}

void backward_mma(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, const bf* out,
                  const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  HERD_CHECK(p.d % 16 == 0 && p.d >= 16 && p.d <= kMaxHeadDim, "mma attention: head_dim ", p.d);
  HERD_CHECK(tiles_of(p.tq, kTile) <= 65535 && tiles_of(p.tk, kTile) <= 65535,
             "mma attention grid: at most 65535 tiles");
  with_nf(p.d, [&]<int NF>() { backward_launch<NF>(p, batch, q, k, v, out, lse, dout, dq, dk, dv); });
}

}  // namespace herd::kernels::cuda::attn
