// Flash-style attention on the CPU: forward with an online softmax, backward recomputing the scores
// from the saved log-sum-exp (FlashAttention-2, Dao 2023). Contracts and layout: attention.h.
//
// Memory per thread: the scaled query tile (D, kTileQ), its accumulator (kTileQ, D), K^T (D, kTileK)
// and V^T (D, kTileK), the score / probability tile (kTileQ, kTileK) and its gradient, and in the
// backward the dK/dV accumulators (kTileK, D) and delta = rowsum(dO * O) for the task's query rows.
// With D = 128 that is under 300 KiB, held in per-thread scratch reused across calls.
//
// Masking works at two levels. A (query tile, key tile) pair is skipped when no pair can be visible
// (all keys later than the latest query, or disjoint document-id ranges) and processed without a
// mask when every pair is visible (all keys at or before the earliest query, one document). Only the
// tiles on the diagonal or on a document boundary pay for the element-wise mask.
#include "herd/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "herd/core/check.h"
#include "herd/kernels/cpu/common.h"
#include "herd/kernels/cpu/tile_gemm.h"

namespace herd::kernels {

namespace {

struct Span {  // position and document-id ranges of a run of tokens
  std::int32_t pos_min, pos_max, doc_min, doc_max;
};

Span span_of(const std::int32_t* pos, const std::int32_t* doc, std::int64_t n) {
  Span s{std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int32_t>::min(), 0, 0};
  for (std::int64_t i = 0; i < n; ++i) {
    s.pos_min = std::min(s.pos_min, pos[i]);
    s.pos_max = std::max(s.pos_max, pos[i]);
  }
  if (doc) {
    s.doc_min = *std::min_element(doc, doc + n);
    s.doc_max = *std::max_element(doc, doc + n);
  }
  return s;
}

enum class TileMask { kSkip, kFull, kPartial };

TileMask classify(const Span& q, const Span& k) {
  if (k.pos_min > q.pos_max || k.doc_max < q.doc_min || k.doc_min > q.doc_max) return TileMask::kSkip;
  const bool one_doc = k.doc_min == k.doc_max && q.doc_min == q.doc_max && k.doc_min == q.doc_min;
  if (one_doc && k.pos_max <= q.pos_min) return TileMask::kFull;
  return TileMask::kPartial;
}

// Sets s[i][j] = -inf where key j is not visible to query i.
template <typename T>
HERD_CPU_CLONES void apply_mask(T* s, std::int64_t qn, std::int64_t kn, const std::int32_t* pq, const std::int32_t* dq,
                                const std::int32_t* pk, const std::int32_t* dk) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t i = 0; i < qn; ++i) {
    T* si = s + i * kn;
    const std::int32_t p = pq[i];
    const std::int32_t d = dq ? dq[i] : 0;
    for (std::int64_t j = 0; j < kn; ++j) {
      const bool visible = pk[j] <= p && (dk ? dk[j] : 0) == d;
      si[j] = visible ? si[j] : neg_inf;
    }
  }
}

// The same on a transposed tile s^T (kn, qn).
template <typename T>
HERD_CPU_CLONES void apply_mask_transposed(T* s, std::int64_t kn, std::int64_t qn, const std::int32_t* pq,
                                           const std::int32_t* dq, const std::int32_t* pk, const std::int32_t* dk) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t j = 0; j < kn; ++j) {
    T* sj = s + j * qn;
    const std::int32_t p = pk[j];
    const std::int32_t dj = dk ? dk[j] : 0;
    for (std::int64_t i = 0; i < qn; ++i) {
      const bool visible = p <= pq[i] && (dq ? dq[i] : 0) == dj;
      sj[i] = visible ? sj[i] : neg_inf;
    }
  }
}

// dst (D, kn) = src rows (kn, D) with row stride ld, transposed.
template <typename T>
HERD_CPU_CLONES void transpose_rows(const T* src, std::int64_t ld, std::int64_t kn, std::int64_t d, T* dst) {
  for (std::int64_t j = 0; j < kn; ++j)
    for (std::int64_t c = 0; c < d; ++c) dst[c * kn + j] = src[j * ld + c];
}

struct Strides {
  std::int64_t q, k, v, o;
};

Strides strides_of(const AttentionDims& d) {
  const std::int64_t qd = d.q_heads * d.head_dim, kd = d.kv_heads * d.head_dim;
  return {d.ld_q ? d.ld_q : qd, d.ld_k ? d.ld_k : kd, d.ld_v ? d.ld_v : kd, d.ld_o ? d.ld_o : qd};
}

void check_dims(const AttentionDims& d, const AttentionMask& m) {
  HERD_CHECK(d.batch >= 1 && d.tq >= 0 && d.tk >= 0 && d.head_dim >= 1, "attention dims");
  HERD_CHECK(d.kv_heads >= 1 && d.q_heads % d.kv_heads == 0, "q_heads (", d.q_heads,
             ") must be a multiple of kv_heads (", d.kv_heads, ")");
  HERD_CHECK(m.pos_q && m.pos_k, "attention needs query and key positions");
  const Strides s = strides_of(d);
  HERD_CHECK(s.q >= d.q_heads * d.head_dim && s.o >= d.q_heads * d.head_dim && s.k >= d.kv_heads * d.head_dim &&
                 s.v >= d.kv_heads * d.head_dim,
             "attention token strides smaller than a token");
}

// Starting a parallel region costs tens of microseconds, far more on oversubscribed cores: only
// worth it when the score work (B * Hq * Tq * Tk * D multiply-adds, before masking) is large.
bool worth_threads(const AttentionDims& d) {
  return static_cast<double>(d.batch) * d.q_heads * d.tq * d.tk * d.head_dim > 4.0e6;
}

}  // namespace

// rows (n, D) with row stride ld -> dst (n, D) contiguous. Packing the strided K/V/Q/dO rows keeps
// the micro-GEMM's operands dense: rows 512 floats apart would all fall into a few L1 sets.
template <typename T>
HERD_CPU_CLONES void pack_rows(const T* src, std::int64_t ld, std::int64_t n, std::int64_t d, T* dst) {
  // Explicit vector moves: GCC turns a plain copy loop into a memmove call, which costs more than the
  // copy itself for a 64-float row.
  constexpr std::int64_t L = cpu::Vec64<T>::kLanes;
  for (std::int64_t j = 0; j < n; ++j) {
    const T* sj = src + j * ld;
    T* dj = dst + j * d;
    std::int64_t c = 0;
    for (; c + L <= d; c += L) cpu::vstore(dj + c, cpu::vload(sj + c));
    for (; c < d; ++c) dj[c] = sj[c];
  }
}

// dst rows (n, D) with row stride ld <- src (n, D) contiguous.
template <typename T>
HERD_CPU_CLONES void unpack_rows(const T* src, std::int64_t n, std::int64_t d, T* dst, std::int64_t ld) {
  constexpr std::int64_t L = cpu::Vec64<T>::kLanes;
  for (std::int64_t j = 0; j < n; ++j) {
    const T* sj = src + j * d;
    T* dj = dst + j * ld;
    std::int64_t c = 0;
    for (; c + L <= d; c += L) cpu::vstore(dj + c, cpu::vload(sj + c));
    for (; c < d; ++c) dj[c] = sj[c];
  }
}

// One task is (sequence, KV head, query tile) and handles the Hq/Hkv query heads that share the KV
// head, so each K/V tile is packed once for all of them. Scores are computed transposed,
// s^T (kn, qn) = K (q * scale)^T: the query tile is transposed once and reused for every key tile,
// and the softmax statistics of the qn queries are vectors along a row of s^T.
template <typename T>
HERD_CPU_CLONES void attention_forward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k,
                                       const T* v, T* out, T* lse) {
  check_dims(d, m);
  const Strides st = strides_of(d);
  const std::int64_t D = d.head_dim, group = d.q_heads / d.kv_heads;
  const std::int64_t n_qt = (d.tq + kAttnTileQ - 1) / kAttnTileQ;
  const std::int64_t tasks = d.batch * d.kv_heads * n_qt;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const bool threaded = worth_threads(d);
  constexpr std::int64_t TQ = kAttnTileQ, TK = kAttnTileK;

#pragma omp parallel for schedule(dynamic, 1) if (threaded)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t qt = task % n_qt, hk = (task / n_qt) % d.kv_heads, b = task / (n_qt * d.kv_heads);
    const std::int64_t q0 = qt * TQ, qn = std::min(TQ, d.tq - q0);
    T* qts = cpu::thread_scratch<T, 0>(group * D * TQ);  // (group, D, qn) scaled queries, transposed
    T* acc = cpu::thread_scratch<T, 1>(group * TQ * D);  // (group, qn, D)
    T* kc = cpu::thread_scratch<T, 2>(2 * TK * D);       // (kn, D) packed keys, then values
    T* vc = kc + TK * D;
    T* s = cpu::thread_scratch<T, 3>(TK * TQ);  // (kn, qn) scores, then probabilities
    T* stats = cpu::thread_scratch<T, 4>(group * 2 * TQ + 3 * TQ);
    T *tile_m = stats + group * 2 * TQ, *alpha = tile_m + TQ, *tile_l = alpha + TQ;

    const std::int32_t* pq = m.pos_q + b * d.tq + q0;
    const std::int32_t* dq = m.doc_q ? m.doc_q + b * d.tq + q0 : nullptr;
    const Span qspan = span_of(pq, dq, qn);
    for (std::int64_t g = 0; g < group; ++g) {
      T* qg = qts + g * D * qn;
      for (std::int64_t i = 0; i < qn; ++i) {
        const T* src = q + (b * d.tq + q0 + i) * st.q + (hk * group + g) * D;
        for (std::int64_t c = 0; c < D; ++c) qg[c * qn + i] = src[c] * scale;
        stats[g * 2 * TQ + i] = neg_inf;  // running max
        stats[g * 2 * TQ + TQ + i] = 0;   // running sum of exponentials
      }
    }
    std::fill(acc, acc + group * qn * D, T(0));

    for (std::int64_t k0 = 0; k0 < d.tk; k0 += TK) {
      const std::int64_t kn = std::min(TK, d.tk - k0);
      const std::int32_t* pk = m.pos_k + b * d.tk + k0;
      const std::int32_t* dk = m.doc_k ? m.doc_k + b * d.tk + k0 : nullptr;
      const TileMask tm = classify(qspan, span_of(pk, dk, kn));
      if (tm == TileMask::kSkip) continue;
      pack_rows(k + (b * d.tk + k0) * st.k + hk * D, st.k, kn, D, kc);
      pack_rows(v + (b * d.tk + k0) * st.v + hk * D, st.v, kn, D, vc);
      for (std::int64_t g = 0; g < group; ++g) {
        T *row_m = stats + g * 2 * TQ, *row_l = row_m + TQ, *ag = acc + g * qn * D;
        cpu::tile_gemm<T>(kn, qn, D, kc, D, 1, qts + g * D * qn, qn, s, qn, false);  // s^T = k (q * scale)^T
        if (tm == TileMask::kPartial) apply_mask_transposed(s, kn, qn, pq, dq, pk, dk);
        std::fill(tile_m, tile_m + qn, neg_inf);
        for (std::int64_t j = 0; j < kn; ++j) {
          const T* sj = s + j * qn;
#pragma omp simd
          for (std::int64_t i = 0; i < qn; ++i) tile_m[i] = std::max(tile_m[i], sj[i]);
        }
        for (std::int64_t i = 0; i < qn; ++i) {
          const T mnew = std::max(row_m[i], tile_m[i]);
          alpha[i] = row_m[i] == neg_inf ? T(0) : cpu::fast_exp(row_m[i] - mnew);
          row_m[i] = mnew;
          tile_l[i] = 0;
        }
        for (std::int64_t j = 0; j < kn; ++j) {
          T* sj = s + j * qn;
#pragma omp simd
          for (std::int64_t i = 0; i < qn; ++i) {
            const T p = sj[i] == neg_inf ? T(0) : cpu::fast_exp(sj[i] - row_m[i]);
            sj[i] = p;
            tile_l[i] += p;
          }
        }
        for (std::int64_t i = 0; i < qn; ++i) {
          row_l[i] = row_l[i] * alpha[i] + tile_l[i];
          if (alpha[i] != T(1)) {
            T* ai = ag + i * D;
            const T a = alpha[i];
#pragma omp simd
            for (std::int64_t c = 0; c < D; ++c) ai[c] *= a;
          }
        }
        cpu::tile_gemm<T>(qn, D, kn, s, 1, qn, vc, D, ag, D, true);  // acc += p v
      }
    }

    for (std::int64_t g = 0; g < group; ++g) {
      const std::int64_t h = hk * group + g;
      const T *row_m = stats + g * 2 * TQ, *row_l = row_m + TQ, *ag = acc + g * qn * D;
      for (std::int64_t i = 0; i < qn; ++i) {
        T* o = out + (b * d.tq + q0 + i) * st.o + h * D;
        const T l = row_l[i];
        const T inv = l > T(0) ? T(1) / l : T(0);
        for (std::int64_t c = 0; c < D; ++c) o[c] = ag[i * D + c] * inv;
        lse[(b * d.q_heads + h) * d.tq + q0 + i] = l > T(0) ? row_m[i] + std::log(l) : neg_inf;
      }
    }
  }
}

// One task is (sequence, KV head): it owns dk/dv of that head and dq of its query heads, so tasks
// never write the same memory. Key tiles are the outer loop (FlashAttention-2's backward order):
// dK/dV of a key tile accumulate in registers-sized buffers across all query tiles and heads, while
// dQ accumulates in a task-local (group, Tq, D) buffer copied out at the end, beside Q and dO
// packed once per task.
template <typename T>
HERD_CPU_CLONES void attention_backward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k,
                                        const T* v, const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  check_dims(d, m);
  const Strides st = strides_of(d);
  const std::int64_t D = d.head_dim, group = d.q_heads / d.kv_heads;
  const std::int64_t tasks = d.batch * d.kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const bool threaded = worth_threads(d);
  constexpr std::int64_t TQ = kAttnTileQ, TK = kAttnTileK;

#pragma omp parallel for schedule(dynamic, 1) if (threaded)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t hk = task % d.kv_heads, b = task / d.kv_heads;
    const std::int64_t h0 = hk * group;
    T* tiles = cpu::thread_scratch<T, 0>(8 * TK * D);
    T *kc = tiles, *vc = kc + TK * D, *kt = vc + TK * D, *vt = kt + TK * D;  // (kn, D) x2, (D, kn) x2
    T *dk_acc = vt + TK * D, *dv_acc = dk_acc + TK * D;                      // (kn, D) each
    T* p = cpu::thread_scratch<T, 1>(2 * TQ * TK);                           // (qn, kn) P, then dP / dS
    T* dp = p + TQ * TK;
    T* delta = cpu::thread_scratch<T, 2>(static_cast<std::size_t>(group * d.tq));  // (group, Tq)
    // (group, Tq, D) each: dQ accumulator, and Q and dO of the task's heads packed once (re-reading
    // them strided for every key tile costs more than the arithmetic).
    T* dq_local = cpu::thread_scratch<T, 3>(static_cast<std::size_t>(3 * group * d.tq * D));
    T* q_all = dq_local + group * d.tq * D;
    T* go_all = q_all + group * d.tq * D;

    // delta_i = dO_i . O_i per query row.
    for (std::int64_t g = 0; g < group; ++g) {
      for (std::int64_t i = 0; i < d.tq; ++i) {
        const T* o = out + (b * d.tq + i) * st.o + (h0 + g) * D;
        const T* go = dout + (b * d.tq + i) * st.o + (h0 + g) * D;
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (std::int64_t c = 0; c < D; ++c) sum += o[c] * go[c];
        delta[g * d.tq + i] = sum;
      }
      pack_rows(q + b * d.tq * st.q + (h0 + g) * D, st.q, d.tq, D, q_all + g * d.tq * D);
      pack_rows(dout + b * d.tq * st.o + (h0 + g) * D, st.o, d.tq, D, go_all + g * d.tq * D);
    }
    std::fill(dq_local, dq_local + group * d.tq * D, T(0));

    for (std::int64_t k0 = 0; k0 < d.tk; k0 += TK) {
      const std::int64_t kn = std::min(TK, d.tk - k0);
      const std::int32_t* pk = m.pos_k + b * d.tk + k0;
      const std::int32_t* dkd = m.doc_k ? m.doc_k + b * d.tk + k0 : nullptr;
      const Span kspan = span_of(pk, dkd, kn);
      const T* kb = k + (b * d.tk + k0) * st.k + hk * D;
      const T* vb = v + (b * d.tk + k0) * st.v + hk * D;
      pack_rows(kb, st.k, kn, D, kc);
      pack_rows(vb, st.v, kn, D, vc);
      transpose_rows(kc, D, kn, D, kt);
      transpose_rows(vc, D, kn, D, vt);
      std::fill(dk_acc, dk_acc + kn * D, T(0));
      std::fill(dv_acc, dv_acc + kn * D, T(0));

      for (std::int64_t q0 = 0; q0 < d.tq; q0 += TQ) {
        const std::int64_t qn = std::min(TQ, d.tq - q0);
        const std::int32_t* pq = m.pos_q + b * d.tq + q0;
        const std::int32_t* dqd = m.doc_q ? m.doc_q + b * d.tq + q0 : nullptr;
        const TileMask tm = classify(span_of(pq, dqd, qn), kspan);
        if (tm == TileMask::kSkip) continue;
        for (std::int64_t g = 0; g < group; ++g) {
          const std::int64_t h = h0 + g;
          const T* qc = q_all + (g * d.tq + q0) * D;
          const T* gc = go_all + (g * d.tq + q0) * D;
          cpu::tile_gemm<T>(qn, kn, D, qc, D, 1, kt, kn, p, kn, false);  // unscaled scores
          if (tm == TileMask::kPartial) apply_mask(p, qn, kn, pq, dqd, pk, dkd);
          const T* lrow = lse + (b * d.q_heads + h) * d.tq + q0;
          for (std::int64_t i = 0; i < qn; ++i) {
            T* pi = p + i * kn;
            const T li = lrow[i];
            if (li == neg_inf) {
              std::fill(pi, pi + kn, T(0));
              continue;
            }
#pragma omp simd
            for (std::int64_t j = 0; j < kn; ++j) pi[j] = pi[j] == neg_inf ? T(0) : cpu::fast_exp(pi[j] * scale - li);
          }
          cpu::tile_gemm<T>(kn, D, qn, p, 1, kn, gc, D, dv_acc, D, true);  // dV += P^T dO
          cpu::tile_gemm<T>(qn, kn, D, gc, D, 1, vt, kn, dp, kn, false);   // dP = dO V^T
          const T* drow = delta + g * d.tq + q0;
          for (std::int64_t i = 0; i < qn; ++i) {
            T* dpi = dp + i * kn;
            const T* pi = p + i * kn;
            const T di = drow[i];
#pragma omp simd
            for (std::int64_t j = 0; j < kn; ++j) dpi[j] = pi[j] * (dpi[j] - di) * scale;  // scale * dS
          }
          cpu::tile_gemm<T>(kn, D, qn, dp, 1, kn, qc, D, dk_acc, D, true);  // dK += scale dS^T Q
          T* dqg = dq_local + (g * d.tq + q0) * D;
          cpu::tile_gemm<T>(qn, D, kn, dp, kn, 1, kc, D, dqg, D, true);  // dQ += scale dS K
        }
      }
      unpack_rows(dk_acc, kn, D, dk + (b * d.tk + k0) * st.k + hk * D, st.k);
      unpack_rows(dv_acc, kn, D, dv + (b * d.tk + k0) * st.v + hk * D, st.v);
    }
    for (std::int64_t g = 0; g < group; ++g)
      unpack_rows(dq_local + g * d.tq * D, d.tq, D, dq + b * d.tq * st.q + (h0 + g) * D, st.q);
  }
}

template void attention_forward<float>(const AttentionDims&, const AttentionMask&, const float*, const float*,
                                       const float*, float*, float*);
template void attention_forward<double>(const AttentionDims&, const AttentionMask&, const double*, const double*,
                                        const double*, double*, double*);
template void attention_backward<float>(const AttentionDims&, const AttentionMask&, const float*, const float*,
                                        const float*, const float*, const float*, const float*, float*, float*, float*);
template void attention_backward<double>(const AttentionDims&, const AttentionMask&, const double*, const double*,
                                         const double*, const double*, const double*, const double*, double*, double*,
                                         double*);

}  // namespace herd::kernels
