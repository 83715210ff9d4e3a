// Flash-style attention on the CPU: forward with an online softmax, backward recomputing the scores
// from the saved log-sum-exp (FlashAttention-2, Dao 2023). Contracts and layout: attention.h.
//
// Memory per thread: the scaled query tile (kTileQ, D), its accumulator (kTileQ, D), K^T (D, kTileK)
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
void apply_mask(T* s, std::int64_t qn, std::int64_t kn, const std::int32_t* pq, const std::int32_t* dq,
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

// dst (D, kn) = src rows (kn, D) with row stride ld, transposed.
template <typename T>
void transpose_rows(const T* src, std::int64_t ld, std::int64_t kn, std::int64_t d, T* dst) {
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

template <typename T>
void attention_forward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v, T* out,
                       T* lse) {
  check_dims(d, m);
  const Strides st = strides_of(d);
  const std::int64_t D = d.head_dim, group = d.q_heads / d.kv_heads;
  const std::int64_t n_qt = (d.tq + kAttnTileQ - 1) / kAttnTileQ;
  const std::int64_t tasks = d.batch * d.q_heads * n_qt;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const bool threaded = worth_threads(d);

#pragma omp parallel for schedule(dynamic, 1) if (threaded)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t qt = task % n_qt, h = (task / n_qt) % d.q_heads, b = task / (n_qt * d.q_heads);
    const std::int64_t hk = h / group;
    const std::int64_t q0 = qt * kAttnTileQ, qn = std::min(kAttnTileQ, d.tq - q0);
    T* qs = cpu::thread_scratch<T, 0>(kAttnTileQ * D);          // (qn, D) scaled queries
    T* acc = cpu::thread_scratch<T, 1>(kAttnTileQ * D);         // (qn, D)
    T* kt = cpu::thread_scratch<T, 2>(D * kAttnTileK);          // (D, kn)
    T* s = cpu::thread_scratch<T, 3>(kAttnTileQ * kAttnTileK);  // (qn, kn)
    T* row_m = cpu::thread_scratch<T, 4>(2 * kAttnTileQ);
    T* row_l = row_m + kAttnTileQ;

    const std::int32_t* pq = m.pos_q + b * d.tq + q0;
    const std::int32_t* dq = m.doc_q ? m.doc_q + b * d.tq + q0 : nullptr;
    const Span qspan = span_of(pq, dq, qn);
    for (std::int64_t i = 0; i < qn; ++i) {
      const T* src = q + (b * d.tq + q0 + i) * st.q + h * D;
      for (std::int64_t c = 0; c < D; ++c) qs[i * D + c] = src[c] * scale;
      row_m[i] = neg_inf;
      row_l[i] = 0;
    }
    std::fill(acc, acc + qn * D, T(0));

    for (std::int64_t k0 = 0; k0 < d.tk; k0 += kAttnTileK) {
      const std::int64_t kn = std::min(kAttnTileK, d.tk - k0);
      const std::int32_t* pk = m.pos_k + b * d.tk + k0;
      const std::int32_t* dk = m.doc_k ? m.doc_k + b * d.tk + k0 : nullptr;
      const TileMask tm = classify(qspan, span_of(pk, dk, kn));
      if (tm == TileMask::kSkip) continue;
      const T* kb = k + (b * d.tk + k0) * st.k + hk * D;
      const T* vb = v + (b * d.tk + k0) * st.v + hk * D;
      transpose_rows(kb, st.k, kn, D, kt);
      cpu::tile_gemm<T>(qn, kn, D, qs, D, 1, kt, kn, s, kn, false);  // s = (q * scale) k^T
      if (tm == TileMask::kPartial) apply_mask(s, qn, kn, pq, dq, pk, dk);
      for (std::int64_t i = 0; i < qn; ++i) {
        T* si = s + i * kn;
        T mx = neg_inf;
#pragma omp simd reduction(max : mx)
        for (std::int64_t j = 0; j < kn; ++j) mx = std::max(mx, si[j]);
        if (mx == neg_inf) {  // nothing visible in this tile for this query
          std::fill(si, si + kn, T(0));
          continue;
        }
        const T mnew = std::max(row_m[i], mx);
        const T alpha = row_m[i] == neg_inf ? T(0) : cpu::fast_exp(row_m[i] - mnew);
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (std::int64_t j = 0; j < kn; ++j) {
          const T p = si[j] == neg_inf ? T(0) : cpu::fast_exp(si[j] - mnew);
          si[j] = p;
          sum += p;
        }
        row_l[i] = row_l[i] * alpha + sum;
        row_m[i] = mnew;
        if (alpha != T(1)) {
          T* ai = acc + i * D;
#pragma omp simd
          for (std::int64_t c = 0; c < D; ++c) ai[c] *= alpha;
        }
      }
      cpu::tile_gemm<T>(qn, D, kn, s, kn, 1, vb, st.v, acc, D, true);  // acc += p v
    }

    for (std::int64_t i = 0; i < qn; ++i) {
      T* o = out + (b * d.tq + q0 + i) * st.o + h * D;
      const T l = row_l[i];
      const T inv = l > T(0) ? T(1) / l : T(0);
      for (std::int64_t c = 0; c < D; ++c) o[c] = acc[i * D + c] * inv;
      lse[(b * d.q_heads + h) * d.tq + q0 + i] = l > T(0) ? row_m[i] + std::log(l) : neg_inf;
    }
  }
}

template <typename T>
void attention_backward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  check_dims(d, m);
  const Strides st = strides_of(d);
  const std::int64_t D = d.head_dim, group = d.q_heads / d.kv_heads;
  const std::int64_t tasks = d.batch * d.kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const bool threaded = worth_threads(d);

#pragma omp parallel for schedule(dynamic, 1) if (threaded)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t hk = task % d.kv_heads, b = task / d.kv_heads;
    const std::int64_t h0 = hk * group;
    T* kt = cpu::thread_scratch<T, 0>(D * kAttnTileK);                             // (D, kn)
    T* vt = cpu::thread_scratch<T, 1>(D * kAttnTileK);                             // (D, kn)
    T* dk_acc = cpu::thread_scratch<T, 2>(kAttnTileK * D);                         // (kn, D)
    T* dv_acc = cpu::thread_scratch<T, 3>(kAttnTileK * D);                         // (kn, D)
    T* p = cpu::thread_scratch<T, 4>(kAttnTileQ * kAttnTileK);                     // (qn, kn)
    T* dp = cpu::thread_scratch<T, 5>(kAttnTileQ * kAttnTileK);                    // (qn, kn)
    T* qs = cpu::thread_scratch<T, 6>(kAttnTileQ * D);                             // (qn, D)
    T* delta = cpu::thread_scratch<T, 7>(static_cast<std::size_t>(group * d.tq));  // (group, Tq)

    // delta_i = dO_i . O_i per query row; dq rows of this task's heads start at zero.
    for (std::int64_t g = 0; g < group; ++g) {
      for (std::int64_t i = 0; i < d.tq; ++i) {
        const T* o = out + (b * d.tq + i) * st.o + (h0 + g) * D;
        const T* go = dout + (b * d.tq + i) * st.o + (h0 + g) * D;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (std::int64_t c = 0; c < D; ++c) s += o[c] * go[c];
        delta[g * d.tq + i] = s;
        std::fill(dq + (b * d.tq + i) * st.q + (h0 + g) * D, dq + (b * d.tq + i) * st.q + (h0 + g + 1) * D, T(0));
      }
    }

    for (std::int64_t k0 = 0; k0 < d.tk; k0 += kAttnTileK) {
      const std::int64_t kn = std::min(kAttnTileK, d.tk - k0);
      const std::int32_t* pk = m.pos_k + b * d.tk + k0;
      const std::int32_t* dkd = m.doc_k ? m.doc_k + b * d.tk + k0 : nullptr;
      const Span kspan = span_of(pk, dkd, kn);
      const T* kb = k + (b * d.tk + k0) * st.k + hk * D;
      const T* vb = v + (b * d.tk + k0) * st.v + hk * D;
      transpose_rows(kb, st.k, kn, D, kt);
      transpose_rows(vb, st.v, kn, D, vt);
      std::fill(dk_acc, dk_acc + kn * D, T(0));
      std::fill(dv_acc, dv_acc + kn * D, T(0));

      for (std::int64_t q0 = 0; q0 < d.tq; q0 += kAttnTileQ) {
        const std::int64_t qn = std::min(kAttnTileQ, d.tq - q0);
        const std::int32_t* pq = m.pos_q + b * d.tq + q0;
        const std::int32_t* dqd = m.doc_q ? m.doc_q + b * d.tq + q0 : nullptr;
        const TileMask tm = classify(span_of(pq, dqd, qn), kspan);
        if (tm == TileMask::kSkip) continue;
        for (std::int64_t g = 0; g < group; ++g) {
          const std::int64_t h = h0 + g;
          for (std::int64_t i = 0; i < qn; ++i) {
            const T* src = q + (b * d.tq + q0 + i) * st.q + h * D;
            for (std::int64_t c = 0; c < D; ++c) qs[i * D + c] = src[c] * scale;
          }
          cpu::tile_gemm<T>(qn, kn, D, qs, D, 1, kt, kn, p, kn, false);  // scores
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
            for (std::int64_t j = 0; j < kn; ++j) pi[j] = pi[j] == neg_inf ? T(0) : cpu::fast_exp(pi[j] - li);
          }
          const T* gob = dout + (b * d.tq + q0) * st.o + h * D;
          cpu::tile_gemm<T>(kn, D, qn, p, 1, kn, gob, st.o, dv_acc, D, true);  // dV += P^T dO
          cpu::tile_gemm<T>(qn, kn, D, gob, st.o, 1, vt, kn, dp, kn, false);   // dP = dO V^T
          const T* drow = delta + g * d.tq + q0;
          for (std::int64_t i = 0; i < qn; ++i) {
            T* dpi = dp + i * kn;
            const T* pi = p + i * kn;
            const T di = drow[i];
#pragma omp simd
            for (std::int64_t j = 0; j < kn; ++j) dpi[j] = pi[j] * (dpi[j] - di);  // dS
          }
          cpu::tile_gemm<T>(kn, D, qn, dp, 1, kn, qs, D, dk_acc, D, true);  // dK += dS^T (q * scale)
          for (std::int64_t e = 0; e < qn * kn; ++e) dp[e] *= scale;
          T* dqb = dq + (b * d.tq + q0) * st.q + h * D;
          cpu::tile_gemm<T>(qn, D, kn, dp, kn, 1, kb, st.k, dqb, st.q, true);  // dQ += scale dS K
        }
      }
      for (std::int64_t j = 0; j < kn; ++j) {
        std::copy(dk_acc + j * D, dk_acc + (j + 1) * D, dk + (b * d.tk + k0 + j) * st.k + hk * D);
        std::copy(dv_acc + j * D, dv_acc + (j + 1) * D, dv + (b * d.tk + k0 + j) * st.v + hk * D);
      }
    }
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
