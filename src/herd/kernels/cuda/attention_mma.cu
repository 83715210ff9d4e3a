// Tensor-core flash attention on inline-PTX mma.sync with register-resident accumulators, for bf16 q,
// k, v (kernels/attention.h). Taken by the bf16 calls with head_dim D a multiple of 16 up to 128 unless
// set_attention_kernels names kCudaCores (kernels.h); the mask and tile-skipping rules are
// attention_common.cuh's, the reference the tests hold these kernels to is attention.cu's CUDA-core path.
// Numerics (FlashAttention-2's bf16 recipe, as kernels/cpu/attention_bf16.cpp):
//   forward   S = Q K^T of the bf16 inputs in fp32, times scale = 1/sqrt(D) in fp32 (q is not
//             pre-scaled, so it is not rounded again); running max, exponentials (exp_e: exp2f of the
//             log2e-scaled argument) and their sum l in fp32 (l sums the unrounded P); P rounded to bf16
//             for P V; out = acc / l rounded to bf16, lse = m + log l.
//   backward  dO (fp32 in the contract) rounded to bf16 once, by the delta kernel, into a bf16 copy that
//             dq and dkdv stage: it enters dP = dO V^T and dV += P^T dO on the tensor cores, and
//             delta = rowsum(bf16(dO) * out) uses the same rounded values. P = exp(S scale - lse) in
//             fp32, dS = P (dP - delta) in fp32 from the unrounded P; bf16(P) for dV, bf16(scale dS) for
//             dK += dS^T Q and dQ += dS K. Every sum fp32. Deterministic: a separate dq pass, no atomics.
// Files: this one (the forward), attention_mma_backward.cu (delta, dq, dkdv, group sum),
// attention_mma.cuh (the device helpers both use).
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
// Kernels (64 x 64 tiles, 128 threads = 4 warps; warp w owns rows 16w..16w+15 of the block's tile;
// the forward at D <= 64: 128 query rows x 64 keys, 256 threads = 8 warps, kFwdRows below):
//   forward   grid (Hq, ceil(Tq/R), B) (R = 128 at D <= 64, else 64 query rows per block), query tile
//             ceil(Tq/R) - 1 - blockIdx.y: heads vary fastest and the last query tiles (the most keys to
//             see under the causal mask) are dispatched first, so the long blocks do not trail. The
//             warp's Q A-fragments stay in registers; per key tile S (16 x 64: 8 C fragments), the
//             online softmax on the C layout (a lane holds rows g and g + 8; the row max and sum reduce
//             over the quad with shuffles xor 1 and 2), P packed into A fragments, O (16 x D: D / 8 C
//             fragments) += P V. out = O / l, lse = m + log l.
//   delta     one warp per (token, query head): delta, and bf16(dO) into a dense bf16 copy (B Tq Hq D
//             bf16 of scratch from the caching allocator, rows 16-byte aligned for cp.async).
//   dq        grid (Hq, ceil(Tq/64), B), the last query tiles first; per key tile S = Q K^T and dP = dO V^T (8 C
//   fragments each), dS in
//             registers, dQ (16 x D) += dS K. Written once at the end (fp32 overwrite).
//   dkdv      grid (Hkv, ceil(Tk/64), B) (the first key tiles, which see the most queries, first); warp
//             w owns keys 16w..16w+15, over the group's query heads and their query tiles: S^T = K Q^T
//             and dP^T = V dO^T (16 keys x 64 queries), P^T and dS^T in registers (lse and delta
//             indexed by column), dV += P^T dO and dK += dS^T Q. When that grid is small (under four
//             blocks per SM) and the group larger than 1, one block per query head instead (grid (Hq,
//             ...)), each head's share into fp32 partials that a second kernel sums over the group in
//             head order (deterministic; 2 B Tk Hq D floats of scratch from the caching allocator).
// Pipeline: the tiles a block loops over (K and V in forward and dq; Q, bf16 dO, lse and delta in
// dkdv) are double-buffered in shared memory and copied by cp.async (16-byte cp.async.cg; 4-byte .ca
// for lse / delta; rows past the end zero-filled with src-size 0; plain loads when a row is not
// 16-byte aligned). Iteration i: a block-wide vote (__syncthreads_or) on tile i + 1's mask (in
// registers, loaded during iteration i - 1) decides whether tile i + 1 is skipped; its barrier also
// ends iteration i - 1's reads of buffer (i + 1) % 2, into which the mask is then stored and, when
// visible, tile i + 1's copies issued; commit (one group per iteration, empty when skipped); then, if
// tile i is visible, wait_group 1 (tile i's group done) and a barrier before computing on buffer i % 2.
// dq's Q and dO go by cp.async in the first group (with tile 0); forward Q and dkdv K, V are staged
// plainly before the loop.
// Shared memory (dynamic, bf16 tiles of 64 rows x (D + 8)): forward Q (128 rows at D = 64) + 2 x (K,
// V) 54 KiB at D = 64 / 85 KiB at D = 128; dq Q, dO + 2 x (K, V) and dkdv K, V + 2 x (Q, dO) 54 / 102
// KiB. Registers (ptxas, sm_90, D = 64 / 128): forward 128 / 224 (at D <= 64 held to 128 by
// __launch_bounds__ for 2 blocks of 8 warps per SM; 8 bytes spilled at D = 64), dq 166 / 220, dkdv
// 168 / 255 (no spills in dq, dkdv): warps per SM 16 / 8 forward, 12 / 8 dq, 12 / 8 dkdv. The tile
// copies address K and V from the kernel parameters (no per-block base pointers held in registers: 56
// bytes of spill at D = 64 otherwise).
// Masking and skipping: a tile no pair can see is skipped by the whole block (as attention.cu); in
// addition a warp skips a tile none of its rows' pairs can see, and skips the element-wise mask when
// every pair of its 16 rows x the tile is visible (all valid, one document, all key positions at or
// before all query positions).
#include <cmath>
#include <cstdint>

#include "herd/kernels/cuda/attention_mma.cuh"

namespace herd::kernels::cuda::attn {
namespace {

using namespace mma;  // NOLINT(google-build-using-namespace): this file's kernel is built from them

// The forward's query rows per block, 16 per warp: 128 (8 warps) at D <= 64, two blocks of 128 registers
// a thread per SM, each K / V tile copied once for 128 queries; 64 (4 warps) above, where a thread needs
// ~224 registers (one block of 8 warps per SM would leave no second block to run while one waits).
template <int NF>
constexpr int kFwdRows = NF <= 4 ? 128 : 64;
template <int NF>
constexpr int kFwdThreads = 2 * kFwdRows<NF>;

template <int NF>
__global__ void __launch_bounds__(kFwdThreads<NF>, NF <= 4 ? 2 : 1)  // D <= 64: 2 blocks of 128 registers per SM
    mma_forward_kernel(Params p, const bf* __restrict__ q, const bf* __restrict__ k, const bf* __restrict__ v,
                       bf* __restrict__ out, float* __restrict__ lse) {
  constexpr int D = NF * 16, kLdX = D + 8, kRows = kFwdRows<NF>, kThr = kFwdThreads<NF>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int pq_s[kRows], dq_s[kRows], pk_s[2][kTile], dk_s[2][kTile], span[4];
  bf* qs = reinterpret_cast<bf*>(smem_raw);
  bf* kv_s = qs + kRows * kLdX;  // buffer i: K at kv_s + 2 i kTile kLdX, V the next kTile rows
  const int b = blockIdx.z, h = blockIdx.x, hk = h / p.group;
  const std::int64_t q0 = static_cast<std::int64_t>(gridDim.y - 1 - blockIdx.y) * kRows;
  const int qn = static_cast<int>(p.tq - q0 < kRows ? p.tq - q0 : kRows);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp;            // the warp's first query row
  const int ra = r0 + g, rb = ra + 8;  // this lane's two rows (C fragment elements 0,1 and 2,3)
  const int wn = min(16, qn - r0);     // the warp's valid rows (<= 0: none)
  const std::int64_t kv_off = static_cast<std::int64_t>(hk) * D;

  stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kRows);
  stage_bf16<kThr, kRows>(qs, kLdX, q + (b * p.tq + q0) * p.ld_q + static_cast<std::int64_t>(h) * D, p.ld_q, qn, D);
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

  // The key tiles, double-buffered (file comment): tile i's K, V and mask in buffer i % 2. A tile's
  // visibility is voted on from its mask in registers (MaskAhead, loaded a tile earlier) one iteration
  // before it comes up; a visible tile's K and V are then copied by cp.async into the other buffer
  // while this iteration computes. One commit group per iteration (empty when nothing was copied).
  const std::int32_t* pos_k = p.pos_k + b * p.tk;
  const std::int32_t* doc_k = p.doc_k ? p.doc_k + b * p.tk : nullptr;
  const auto stage_kv = [&](int buf, std::int64_t first) {
    const int n = static_cast<int>(p.tk - first < kTile ? p.tk - first : kTile);
    bf* dst = kv_s + 2 * buf * kTile * kLdX;
    stage_bf16_async<D, kThr>(dst, kLdX, k + (b * p.tk + first) * p.ld_k + kv_off, p.ld_k, n);
    stage_bf16_async<D, kThr>(dst + kTile * kLdX, kLdX, v + (b * p.tk + first) * p.ld_v + kv_off, p.ld_v, n);
  };
  // Some pair of the tile whose mask `ahead` holds may be visible (block-wide vote; a barrier).
  const auto vote = [&](const MaskAhead& a) {
    return __syncthreads_or(a.valid && a.pos <= q_pos_max && a.doc >= q_doc_min && a.doc <= q_doc_max) != 0;
  };
  MaskAhead ahead;
  ahead.load(pos_k, doc_k, 0, p.tk);
  bool vis = vote(ahead);  // tile 0
  ahead.store(pk_s[0], dk_s[0]);
  ahead.load(pos_k, doc_k, kTile, p.tk);
  if (vis) stage_kv(0, 0);
  cp_async_commit();
  for (std::int64_t k0 = 0; k0 < p.tk; k0 += kTile) {
    const int kn = static_cast<int>(p.tk - k0 < kTile ? p.tk - k0 : kTile);
    const int cur = static_cast<int>((k0 / kTile) & 1), nxt = cur ^ 1;
    // The vote's barrier also ends the previous iteration's reads of buffer nxt (K, V, mask).
    const bool vis_cur = vis;
    vis = vote(ahead);  // tile k0 + 64 (none past the end: no valid token)
    ahead.store(pk_s[nxt], dk_s[nxt]);
    ahead.load(pos_k, doc_k, k0 + 2 * kTile, p.tk);
    if (vis) stage_kv(nxt, k0 + kTile);
    cp_async_commit();
    if (!vis_cur) continue;  // no pair of this tile is visible (uniform across the block)
    cp_async_wait<1>();      // this tile's group (all but the one just committed)
    __syncthreads();
    const bf* ks = kv_s + 2 * cur * kTile * kLdX;
    const bf* vs = ks + kTile * kLdX;
    const int* pkc = pk_s[cur];
    const int* dkc = dk_s[cur];
    const Span wk = warp_span(pkc, dkc, 0, kn);
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
        if (!full && !visible(e < 2 ? ra : rb, 8 * j + 2 * t + (e & 1), qn, kn, pq_s, dq_s, pkc, dkc)) x = -INFINITY;
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
  cp_async_wait<0>();  // none pending (every copied tile was waited for): for form's sake

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

template <int NF>
void forward_launch(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, bf* out, float* lse) {
  const std::size_t smem = tiles_smem(kFwdRows<NF> / kTile + 4, NF * 16);  // Q, then K, V twice
  allow_smem(mma_forward_kernel<NF>, smem);
  const dim3 grid(static_cast<unsigned>(p.q_heads), tiles_of(p.tq, kFwdRows<NF>), static_cast<unsigned>(batch));
  mark_part(AttentionPart::kForward);
  mma_forward_kernel<NF><<<grid, kFwdThreads<NF>, smem, stream()>>>(p, q, k, v, out, lse);
  HERD_CUDA_LAUNCHED("attention_forward (mma)");
}

}  // namespace

void forward_mma(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, bf* out, float* lse) {
  HERD_CHECK(p.d % 16 == 0 && p.d >= 16 && p.d <= kMaxHeadDim, "mma attention: head_dim ", p.d);
  HERD_CHECK(tiles_of(p.tq, kTile) <= 65535, "mma attention grid: at most 65535 query tiles");
  if (p.tq == 0) return;
  with_nf(p.d, [&]<int NF>() { forward_launch<NF>(p, batch, q, k, v, out, lse); });
}

}  // namespace herd::kernels::cuda::attn
