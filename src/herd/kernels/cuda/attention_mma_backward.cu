// The backward of the mma.sync flash attention (attention_mma.cu states the contract, the fragment
// layouts, the tiles and the cp.async pipeline): delta with bf16(dO), dq, dk / dv and the group sum.
#include <cstdint>

#include "herd/kernels/cuda/attention_mma.cuh"

namespace herd::kernels::cuda::attn {
namespace {

using namespace mma;  // NOLINT(google-build-using-namespace): this file's kernels are built from them

// delta[(b, h, i)] = sum_c out[b, i, h, c] * bf16(dout[b, i, h, c]), one warp per (token, head), and
// bf16(dO) into do16 (rows of q_heads D per token, dense: 16-byte aligned for cp.async).
constexpr int kDeltaThreads = 256;
__global__ void __launch_bounds__(kDeltaThreads)
    mma_delta_kernel(Params p, std::int64_t rows, const bf* __restrict__ out, const float* __restrict__ dout,
                     float* __restrict__ delta, bf* __restrict__ do16) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (kDeltaThreads / 32);
  const int lane = threadIdx.x & 31;
  for (std::int64_t w = blockIdx.x * static_cast<std::int64_t>(kDeltaThreads / 32) + (threadIdx.x >> 5); w < rows;
       w += warps) {
    const std::int64_t token = w / p.q_heads;
    const int h = static_cast<int>(w - token * p.q_heads);
    const std::int64_t off = token * p.ld_o + static_cast<std::int64_t>(h) * p.d;
    bf* dst = do16 + token * p.q_heads * p.d + static_cast<std::int64_t>(h) * p.d;
    float sum = 0.0f;
    for (int c = lane; c < p.d; c += 32) {
      const bf d16 = narrow_bf16(dout[off + c]);
      dst[c] = d16;
      sum = fmaf(widen(out[off + c]), widen(d16), sum);
    }
    sum = warp_sum(sum);
    const std::int64_t b = token / p.tq, i = token - b * p.tq;
    if (lane == 0) delta[(b * p.q_heads + h) * p.tq + i] = sum;
  }
}

template <int NF>
__global__ void __launch_bounds__(kThreads)
    mma_dq_kernel(Params p, const bf* __restrict__ q, const bf* __restrict__ k, const bf* __restrict__ v,
                  const float* __restrict__ lse, const float* __restrict__ delta, const bf* __restrict__ do16,
                  std::int64_t ld_do, float* __restrict__ dq) {
  constexpr int D = NF * 16, kLdX = D + 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int pq_s[kTile], dq_s[kTile], pk_s[2][kTile], dk_s[2][kTile], span[4];
  __shared__ float lse_s[kTile], delta_s[kTile];
  bf* qs = reinterpret_cast<bf*>(smem_raw);
  bf* dos = qs + kTile * kLdX;
  bf* kv_s = dos + kTile * kLdX;  // buffer i: K at kv_s + 2 i kTile kLdX, V the next kTile rows
  const int b = blockIdx.z, h = blockIdx.x, hk = h / p.group;
  const std::int64_t q0 = static_cast<std::int64_t>(gridDim.y - 1 - blockIdx.y) * kTile;
  const int qn = static_cast<int>(p.tq - q0 < kTile ? p.tq - q0 : kTile);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp, ra = r0 + g, rb = ra + 8, wn = min(16, qn - r0);
  const std::int64_t q_off = static_cast<std::int64_t>(h) * D, kv_off = static_cast<std::int64_t>(hk) * D;
  const std::int64_t stat_row = (static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq;

  // Q and dO by cp.async in the first commit group (with key tile 0's K and V, below): read only
  // after the first wait and barrier.
  stage_bf16_async<D>(qs, kLdX, q + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, qn);
  stage_bf16_async<D>(dos, kLdX, do16 + (b * p.tq + q0) * ld_do + q_off, ld_do, qn);
  stage_mask(pq_s, dq_s, p.pos_q + b * p.tq + q0, p.doc_q ? p.doc_q + b * p.tq + q0 : nullptr, qn, kTile);
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

  // The key tiles, double-buffered as in the forward (mma_forward_kernel, file comment).
  const std::int32_t* pos_k = p.pos_k + b * p.tk;
  const std::int32_t* doc_k = p.doc_k ? p.doc_k + b * p.tk : nullptr;
  const auto stage_kv = [&](int buf, std::int64_t first) {
    const int n = static_cast<int>(p.tk - first < kTile ? p.tk - first : kTile);
    bf* dst = kv_s + 2 * buf * kTile * kLdX;
    stage_bf16_async<D>(dst, kLdX, k + (b * p.tk + first) * p.ld_k + kv_off, p.ld_k, n);
    stage_bf16_async<D>(dst + kTile * kLdX, kLdX, v + (b * p.tk + first) * p.ld_v + kv_off, p.ld_v, n);
  };
  const auto vote = [&](const MaskAhead& a) {
    return __syncthreads_or(a.valid && a.pos <= q_pos_max && a.doc >= q_doc_min && a.doc <= q_doc_max) != 0;
  };
  MaskAhead ahead;
  ahead.load(pos_k, doc_k, 0, p.tk);
  bool vis = vote(ahead);  // tile 0
  ahead.store(pk_s[0], dk_s[0]);
  ahead.load(pos_k, doc_k, kTile, p.tk);
  if (vis) stage_kv(0, 0);
  cp_async_commit();  // Q, dO and tile 0
  for (std::int64_t k0 = 0; k0 < p.tk; k0 += kTile) {
    const int kn = static_cast<int>(p.tk - k0 < kTile ? p.tk - k0 : kTile);
    const int cur = static_cast<int>((k0 / kTile) & 1), nxt = cur ^ 1;
    const bool vis_cur = vis;
    vis = vote(ahead);  // tile k0 + 64; the barrier ends the previous iteration's reads of buffer nxt
    ahead.store(pk_s[nxt], dk_s[nxt]);
    ahead.load(pos_k, doc_k, k0 + 2 * kTile, p.tk);
    if (vis) stage_kv(nxt, k0 + kTile);
    cp_async_commit();
    if (!vis_cur) continue;
    cp_async_wait<1>();  // this tile's group and every earlier one (Q, dO)
    __syncthreads();
    const bf* ks = kv_s + 2 * cur * kTile * kLdX;
    const bf* vs = ks + kTile * kLdX;
    const int* pkc = pk_s[cur];
    const int* dkc = dk_s[cur];
    const Span wk = warp_span(pkc, dkc, 0, kn);
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
        const bool vis_e = li != -INFINITY &&
                           (full || visible(e < 2 ? ra : rb, 8 * j + 2 * t + (e & 1), qn, kn, pq_s, dq_s, pkc, dkc));
        const float pij = vis_e ? exp_e(s[j][e] * p.scale - li) : 0.0f;
        dp[j][e] = pij * (dp[j][e] - di) * p.scale;
      }
    frags_times_tile<NF>(acc, dp, ks, kLdX);  // dQ += bf16(scale dS) K
  }
  cp_async_wait<0>();  // Q and dO when no tile was visible
  write_acc<NF>(dq + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, acc, r0, qn);
}

template <int NF>
__global__ void __launch_bounds__(kThreads)
    mma_dkdv_kernel(Params p, const bf* __restrict__ q, const bf* __restrict__ k, const bf* __restrict__ v,
                    const float* __restrict__ lse, const float* __restrict__ delta, const bf* __restrict__ do16,
                    std::int64_t ld_do, float* __restrict__ dk, float* __restrict__ dv, std::int64_t ld_out,
                    bool per_head) {
  constexpr int D = NF * 16, kLdX = D + 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int pq_s[2][kTile], dq_s[2][kTile], pk_s[kTile], dk_s[kTile], span[4];
  __shared__ float lse_s[2][kTile], delta_s[2][kTile];
  bf* ks = reinterpret_cast<bf*>(smem_raw);
  bf* vs = ks + kTile * kLdX;
  bf* qd_s = vs + kTile * kLdX;  // buffer i: Q at qd_s + 2 i kTile kLdX, dO the next kTile rows
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

  // The query tiles in the order (head, tile), n = (head - first head) tiles + tile, double-buffered
  // as the forward's key tiles (file comment): tile n's Q, dO, lse, delta and mask in buffer n % 2. A
  // tile's mask does not depend on the head, so the one after the last tile of a head is tile 0 again.
  const std::int32_t* pos_q = p.pos_q + b * p.tq;
  const std::int32_t* doc_q = p.doc_q ? p.doc_q + b * p.tq : nullptr;
  const int q_tiles = static_cast<int>((p.tq + kTile - 1) / kTile), n_tiles = (g_end - g_first) * q_tiles;
  const auto first_of = [&](int n) { return static_cast<std::int64_t>(n % q_tiles) * kTile; };
  const auto stage_q = [&](int buf, int n) {
    const int h = hk * p.group + g_first + n / q_tiles;
    const std::int64_t q0 = first_of(n), q_off = static_cast<std::int64_t>(h) * D;
    const int qn = static_cast<int>(p.tq - q0 < kTile ? p.tq - q0 : kTile);
    bf* dst = qd_s + 2 * buf * kTile * kLdX;
    stage_bf16_async<D>(dst, kLdX, q + (b * p.tq + q0) * p.ld_q + q_off, p.ld_q, qn);
    stage_bf16_async<D>(dst + kTile * kLdX, kLdX, do16 + (b * p.tq + q0) * ld_do + q_off, ld_do, qn);
    // lse and delta of the rows (zero-filled past qn: those columns are masked by count, and dS^T is
    // P^T (...) = 0 there).
    const std::int64_t row = (static_cast<std::int64_t>(b) * p.q_heads + h) * p.tq + q0;
    const int i = threadIdx.x;
    if (i < kTile) {
      const bool copy = i < qn;
      cp_async4(&lse_s[buf][i], lse + row + (copy ? i : 0), copy);
      cp_async4(&delta_s[buf][i], delta + row + (copy ? i : 0), copy);
    }
  };
  // Some pair of the query tile whose mask `ahead` holds may be visible (block-wide vote; a barrier).
  const auto vote = [&](const MaskAhead& a, bool exists) {
    return __syncthreads_or(exists && a.valid && a.pos >= k_pos_min && a.doc >= k_doc_min && a.doc <= k_doc_max) != 0;
  };
  MaskAhead ahead;
  ahead.load(pos_q, doc_q, 0, p.tq);
  bool vis = vote(ahead, n_tiles > 0);  // tile 0
  ahead.store(pq_s[0], dq_s[0]);
  ahead.load(pos_q, doc_q, n_tiles > 1 ? first_of(1) : 0, p.tq);
  if (vis) stage_q(0, 0);
  cp_async_commit();
  for (int n = 0; n < n_tiles; ++n) {
    const int cur = n & 1, nxt = cur ^ 1;
    const std::int64_t q0 = first_of(n);
    const int qn = static_cast<int>(p.tq - q0 < kTile ? p.tq - q0 : kTile);
    const bool vis_cur = vis;
    vis = vote(ahead, n + 1 < n_tiles);  // tile n + 1; the barrier ends iteration n - 1's reads of buffer nxt
    ahead.store(pq_s[nxt], dq_s[nxt]);
    ahead.load(pos_q, doc_q, n + 2 < n_tiles ? first_of(n + 2) : 0, p.tq);
    if (vis) stage_q(nxt, n + 1);
    cp_async_commit();
    if (!vis_cur) continue;  // no pair of this tile is visible (uniform across the block)
    cp_async_wait<1>();      // this tile's group (all but the one just committed)
    __syncthreads();
    const bf* qs = qd_s + 2 * cur * kTile * kLdX;
    const bf* dos = qs + kTile * kLdX;
    const int* pqc = pq_s[cur];
    const int* dqc = dq_s[cur];
    const float* lsec = lse_s[cur];
    const float* deltac = delta_s[cur];
    const Span wq = warp_span(pqc, dqc, 0, qn);
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
        const float li = lsec[qc];
        const bool vis_e = li != -INFINITY && (full || visible(qc, e < 2 ? ka : kb, qn, kn, pqc, dqc, pk_s, dk_s));
        s[j][e] = vis_e ? exp_e(s[j][e] * p.scale - li) : 0.0f;
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
      for (int e = 0; e < 4; ++e) dp[j][e] = s[j][e] * (dp[j][e] - deltac[8 * j + 2 * t + (e & 1)]) * p.scale;
    frags_times_tile<NF>(dka, dp, qs, kLdX);  // dK += bf16(scale dS^T) Q
  }
  cp_async_wait<0>();  // none pending (every copied tile was waited for): for form's sake
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

// The dK / dV pass: one block per (key tile, KV head) summing the group's query heads when the group
// is 1 or that grid alone fills the GPU; otherwise one block per (key tile, query head), so that the
// causal imbalance (the first key tile sees every query tile, the last one only its own) is spread over group times
// as many blocks, each head's share into fp32 partials (2 B Tk Hq D floats) summed in head order after.
template <int NF>
void dkdv_launch(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, const float* lse,
                 const float* delta, const bf* do16, float* dk, float* dv) {
  const std::int64_t ld_do = static_cast<std::int64_t>(p.q_heads) * p.d;
  const std::size_t smem = tiles_smem(6, NF * 16);
  allow_smem(mma_dkdv_kernel<NF>, smem);
  const unsigned tiles = tiles_of(p.tk, kTile);
  const std::int64_t kv_blocks = static_cast<std::int64_t>(tiles) * p.kv_heads * batch;
  if (p.group == 1 || p.tq == 0 || kv_blocks >= 4 * static_cast<std::int64_t>(sm_count())) {
    const dim3 grid(static_cast<unsigned>(p.kv_heads), tiles, static_cast<unsigned>(batch));
    mark_part(AttentionPart::kDkdv);
    mma_dkdv_kernel<NF><<<grid, kThreads, smem, stream()>>>(p, q, k, v, lse, delta, do16, ld_do, dk, dv, 0, false);
    HERD_CUDA_LAUNCHED("attention_backward dk dv (mma)");
    return;
  }
  const std::int64_t rows = batch * p.tk, ld_part = static_cast<std::int64_t>(p.q_heads) * p.d;
  DeviceBuffer<float> part_k(rows * ld_part), part_v(rows * ld_part);
  const dim3 grid(static_cast<unsigned>(p.q_heads), tiles, static_cast<unsigned>(batch));
  mark_part(AttentionPart::kDkdv);
  mma_dkdv_kernel<NF><<<grid, kThreads, smem, stream()>>>(p, q, k, v, lse, delta, do16, ld_do, part_k.data(),
                                                          part_v.data(), ld_part, true);
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
    if (p.tk > 0) dkdv_launch<NF>(p, batch, q, k, v, lse, nullptr, nullptr, dk, dv);
    return;
  }
  // delta and bf16(dO) (dense rows of q_heads D), which the dq and dk / dv kernels copy by cp.async.
  const std::int64_t rows = batch * p.tq * p.q_heads;
  DeviceBuffer<float> delta(rows);
  DeviceBuffer<bf> do16(rows * p.d);
  mark_part(AttentionPart::kDelta);
  mma_delta_kernel<<<grid_for(rows, kDeltaThreads / 32, 65535), kDeltaThreads, 0, stream()>>>(
      p, rows, out, dout, delta.data(), do16.data());
  HERD_CUDA_LAUNCHED("attention_backward delta (mma)");
  if (p.tk > 0) dkdv_launch<NF>(p, batch, q, k, v, lse, delta.data(), do16.data(), dk, dv);
  const std::size_t smem = tiles_smem(6, NF * 16);
  allow_smem(mma_dq_kernel<NF>, smem);
  const dim3 q_grid(static_cast<unsigned>(p.q_heads), tiles_of(p.tq, kTile), static_cast<unsigned>(batch));
  mark_part(AttentionPart::kDq);
  mma_dq_kernel<NF><<<q_grid, kThreads, smem, stream()>>>(p, q, k, v, lse, delta.data(), do16.data(),
                                                          static_cast<std::int64_t>(p.q_heads) * p.d, dq);
  HERD_CUDA_LAUNCHED("attention_backward dq (mma)");
  // `delta` and `do16` return to the caching allocator, reused on this stream only after the kernels above.
}

}  // namespace

void backward_mma(const Params& p, std::int64_t batch, const bf* q, const bf* k, const bf* v, const bf* out,
                  const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  HERD_CHECK(p.d % 16 == 0 && p.d >= 16 && p.d <= kMaxHeadDim, "mma attention: head_dim ", p.d);
  HERD_CHECK(tiles_of(p.tq, kTile) <= 65535 && tiles_of(p.tk, kTile) <= 65535,
             "mma attention grid: at most 65535 tiles");
  with_nf(p.d, [&]<int NF>() { backward_launch<NF>(p, batch, q, k, v, out, lse, dout, dq, dk, dv); });
}

}  // namespace herd::kernels::cuda::attn
