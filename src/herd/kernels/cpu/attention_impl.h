// The flash attention kernels' body, shared by the fp32/fp64 kernels (attention.cpp) and the bf16 one
// (attention_bf16.cpp): tiling, masks, tile skipping, the online softmax, the task split and the
// per-thread scratch. Only the tile matmuls and the layout of their operands differ between them; a
// `Tiles` policy supplies those (FloatTiles below: tile_gemm.h on T; Dpbf16Tiles in attention_bf16.cpp).
// Internal to kernels/cpu/: everything has internal linkage (each including file gets its own copy
// and its own target_clones resolvers).
//
// A Tiles policy has types In (q, k, v, out) and T (accumulation, statistics, lse, dout, gradients),
// kScaleScores (the scale goes on the fp32 scores rather than into the query tile), matmul_input(x)
// (the value of a computed matmul input, dO in delta = rowsum(dO * O): x, or x rounded to bf16), and
// two per-task classes:
//   Forward(group, D): queries(g, q rows, ld, qn, scale); keys_values(k rows, ldk, v rows, ldv, kn);
//     scores(g, kn, qn, s) -> s^T (kn, qn); softmax(s, kn, qn, scale, row_m, row_l, alpha): the
//     online softmax step (online_softmax below) leaving P where pv reads it;
//     pv(g, qn, kn, s, acc_g): acc_g (qn, D) += P V.
//   Backward(group, D, Tq): queries(g, q rows, ldq, dout rows, ldo) for the whole sequence;
//     keys_values(...); scores(g, q0, qn, kn, p) -> Q K^T (qn, kn); probabilities(p, qn, kn, scale,
//     lse): P in place (recomputed_probabilities below), and wherever dv reads it; dv(g, q0, qn, kn, p, dv_acc):
//     dV += P^T dO; dp(g, q0, qn, kn, dp) -> dO V^T; ds_dk_dq(g, q0, qn, kn, p, dp, delta, scale,
//     dk_acc, dq_g): dS = P (dP - delta) (scaled_ds, or the same formula fused with the packing),
//     dK += scale dS^T Q, dQ += scale dS K.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "herd/core/bf16.h"
#include "herd/core/check.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/cpu/common.h"
#include "herd/kernels/cpu/tile_gemm.h"

namespace herd::kernels {
namespace {

struct Span {  // position and document-id ranges of a run of tokens
  std::int32_t pos_min, pos_max, doc_min, doc_max;
};

inline Span span_of(const std::int32_t* pos, const std::int32_t* doc, std::int64_t n) {
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

inline TileMask classify(const Span& q, const Span& k) {
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

inline Strides strides_of(const AttentionDims& d) {
  const std::int64_t qd = d.q_heads * d.head_dim, kd = d.kv_heads * d.head_dim;
  return {d.ld_q ? d.ld_q : qd, d.ld_k ? d.ld_k : kd, d.ld_v ? d.ld_v : kd, d.ld_o ? d.ld_o : qd};
}

inline void check_dims(const AttentionDims& d, const AttentionMask& m) {
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
inline bool worth_threads(const AttentionDims& d) {
  return static_cast<double>(d.batch) * d.q_heads * d.tq * d.tk * d.head_dim > 4.0e6;
}

using cpu::widen;

// rows (n, D) with row stride ld -> dst (n, D) contiguous, widened from bf16 where In is bf16. Packing
// the strided K/V/Q/dO rows keeps the micro-GEMM's operands dense: rows 512 floats apart would all
// fall into a few L1 sets.
template <typename In, typename T>
HERD_CPU_CLONES void pack_rows(const In* src, std::int64_t ld, std::int64_t n, std::int64_t d, T* dst) {
  for (std::int64_t j = 0; j < n; ++j) {
    const In* sj = src + j * ld;
    T* dj = dst + j * d;
    std::int64_t c = 0;
    if constexpr (std::is_same_v<In, T>) {
      // Explicit vector moves: GCC turns a plain copy loop into a memmove call, which costs more than
      // the copy itself for a 64-float row.
      constexpr std::int64_t L = cpu::Vec64<T>::kLanes;
      for (; c + L <= d; c += L) cpu::vstore(dj + c, cpu::vload(sj + c));
    }
#pragma omp simd
    for (std::int64_t e = c; e < d; ++e) dj[e] = widen(sj[e]);
  }
}

// The same from fp32 rows, rounded to bf16 values (dO, a matmul input of the bf16 backward).
template <typename T>
HERD_CPU_CLONES void pack_rows_rounded(const T* src, std::int64_t ld, std::int64_t n, std::int64_t d, T* dst) {
  for (std::int64_t j = 0; j < n; ++j) {
#pragma omp simd
    for (std::int64_t c = 0; c < d; ++c) dst[j * d + c] = herd::round_to_bf16(src[j * ld + c]);
  }
}

// Rows of q, out and dO of one head lie a token's width apart (Hq D elements), beyond what the hardware
// prefetcher follows: loops that walk them fetch the row kPrefetchRows ahead (kWrite 1: a row about to
// be written, fetched for ownership).
inline constexpr std::int64_t kPrefetchRows = 8;
template <int kWrite = 0, typename T>
inline void prefetch_row(const T* row, std::int64_t d) {
  const char* p = reinterpret_cast<const char*>(row);
  for (std::int64_t b = 0; b < d * static_cast<std::int64_t>(sizeof(T)); b += 64) __builtin_prefetch(p + b, kWrite);
}

// dst rows (n, D) with row stride ld <- src (n, D) contiguous.
template <typename T>
HERD_CPU_CLONES void unpack_rows(const T* src, std::int64_t n, std::int64_t d, T* dst, std::int64_t ld) {
  constexpr std::int64_t L = cpu::Vec64<T>::kLanes;
  for (std::int64_t j = 0; j < n; ++j) {
    const T* sj = src + j * d;
    T* dj = dst + j * ld;
    if (j + kPrefetchRows < n) prefetch_row<1>(dj + kPrefetchRows * ld, d);
    std::int64_t c = 0;
    for (; c + L <= d; c += L) cpu::vstore(dj + c, cpu::vload(sj + c));
    for (; c < d; ++c) dj[c] = sj[c];
  }
}

// dp (qn, kn) := scale * dS = p (dp - delta_i) scale, row i of the tile being query i.
template <typename T>
[[gnu::always_inline]] inline void scaled_ds(const T* p, T* dp, const T* delta, std::int64_t qn, std::int64_t kn,
                                             T scale) {
  for (std::int64_t i = 0; i < qn; ++i) {
    T* dpi = dp + i * kn;
    const T* pi = p + i * kn;
    const T di = delta[i];
#pragma omp simd
    for (std::int64_t j = 0; j < kn; ++j) dpi[j] = pi[j] * (dpi[j] - di) * scale;
  }
}

// Rounds x (n) to bf16 values in place, or into dst.
template <typename T>
void round_rows(T* x, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) x[i] = herd::round_to_bf16(x[i]);
}
template <typename T>
void round_rows(const T* x, std::int64_t n, T* dst) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) dst[i] = herd::round_to_bf16(x[i]);
}

// One key tile's step of the online softmax over s^T (kn, qn), the scores of qn queries (a row of s^T
// per key): the tile's max, the new running max row_m, alpha = exp(old max - new max) (what the
// accumulator and the running sum are rescaled by), P = exp(s - max) in place of s (0 where masked),
// and row_l = row_l alpha + the tile's sum of P. kScaleScores: s is unscaled and the scale goes into
// the exponent's FMA. The policies' softmax calls this, or does the same in one pass (attention_bf16.cpp).
template <typename T, bool kScaleScores>
HERD_CPU_CLONES void online_softmax(T* s, std::int64_t kn, std::int64_t qn, T scale, T* row_m, T* row_l, T* alpha) {
  constexpr std::int64_t TQ = kAttnTileQ;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  T tile_m[TQ], tile_l[TQ];
  std::fill(tile_m, tile_m + qn, neg_inf);
  for (std::int64_t j = 0; j < kn; ++j) {
    const T* sj = s + j * qn;
#pragma omp simd
    for (std::int64_t i = 0; i < qn; ++i) tile_m[i] = std::max(tile_m[i], sj[i]);
  }
  // The statistics are of the scaled scores: max(s) * scale = max(s * scale), as scale > 0 and
  // rounding is monotonic; the exponent below scales each score with one FMA.
  if constexpr (kScaleScores)
    for (std::int64_t i = 0; i < qn; ++i) tile_m[i] *= scale;
#pragma omp simd
  for (std::int64_t i = 0; i < qn; ++i) {
    const T mnew = std::max(row_m[i], tile_m[i]);
    alpha[i] = cpu::select_bits(row_m[i] == neg_inf, T(0), cpu::fast_exp(row_m[i] - mnew));
    row_m[i] = mnew;
    tile_l[i] = 0;
  }
  for (std::int64_t j = 0; j < kn; ++j) {
    T* sj = s + j * qn;
#pragma omp simd
    for (std::int64_t i = 0; i < qn; ++i) {
      T x;
      if constexpr (kScaleScores) {
        x = sj[i] * scale - row_m[i];
      } else {
        x = sj[i] - row_m[i];
      }
      const T p = cpu::select_bits(sj[i] == neg_inf, T(0), cpu::fast_exp(x));
      sj[i] = p;
      tile_l[i] += p;
    }
  }
  for (std::int64_t i = 0; i < qn; ++i) row_l[i] = row_l[i] * alpha[i] + tile_l[i];
}

// The backward's P = exp(s scale - lse) in place on the recomputed unscaled scores (qn, kn): 0 where
// masked, and on the rows whose lse is -inf (queries that see no key).
template <typename T>
HERD_CPU_CLONES void recomputed_probabilities(T* p, std::int64_t qn, std::int64_t kn, T scale, const T* lse) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (std::int64_t i = 0; i < qn; ++i) {
    T* pi = p + i * kn;
    const T li = lse[i];
    if (li == neg_inf) {
      std::fill(pi, pi + kn, T(0));
      continue;
    }
#pragma omp simd
    for (std::int64_t j = 0; j < kn; ++j)
      pi[j] = cpu::select_bits(pi[j] == neg_inf, T(0), cpu::fast_exp(pi[j] * scale - li));
  }
}

// One task is (sequence, KV head, query tile) and handles the Hq/Hkv query heads that share the KV
// head, so each K/V tile is packed once for all of them. Scores are computed transposed,
// s^T (kn, qn) = K (q * scale)^T: the query tile is transposed once and reused for every key tile,
// and the softmax statistics of the qn queries are vectors along a row of s^T.
template <class Tiles>
HERD_CPU_CLONES void attention_forward_tiled(const AttentionDims& d, const AttentionMask& m,
                                             const typename Tiles::In* q, const typename Tiles::In* k,
                                             const typename Tiles::In* v, typename Tiles::T* out,
                                             typename Tiles::T* lse) {
  using T = typename Tiles::T;
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
    typename Tiles::Forward tiles(group, D);             // the group's query tiles, a K and a V tile
    T* acc = cpu::thread_scratch<T, 1>(group * TQ * D);  // (group, qn, D)
    T* s = cpu::thread_scratch<T, 3>(TK * TQ);           // (kn, qn) scores, then probabilities
    T* stats = cpu::thread_scratch<T, 4>(group * 2 * TQ + TQ);
    T* alpha = stats + group * 2 * TQ;

    const std::int32_t* pq = m.pos_q + b * d.tq + q0;
    const std::int32_t* dq = m.doc_q ? m.doc_q + b * d.tq + q0 : nullptr;
    const Span qspan = span_of(pq, dq, qn);
    for (std::int64_t i = 0; i < qn; ++i) prefetch_row(q + (b * d.tq + q0 + i) * st.q + hk * group * D, group * D);
    for (std::int64_t g = 0; g < group; ++g) {
      tiles.queries(g, q + (b * d.tq + q0) * st.q + (hk * group + g) * D, st.q, qn, scale);
      for (std::int64_t i = 0; i < qn; ++i) {
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
      tiles.keys_values(k + (b * d.tk + k0) * st.k + hk * D, st.k, v + (b * d.tk + k0) * st.v + hk * D, st.v, kn);
      for (std::int64_t g = 0; g < group; ++g) {
        T *row_m = stats + g * 2 * TQ, *row_l = row_m + TQ, *ag = acc + g * qn * D;
        tiles.scores(g, kn, qn, s);  // s^T = k (q * scale)^T, or k q^T (kScaleScores)
        if (tm == TileMask::kPartial) apply_mask_transposed(s, kn, qn, pq, dq, pk, dk);
        // P in place of the scores (or in the policy's matmul layout), the running max and sum, alpha.
        tiles.softmax(s, kn, qn, scale, row_m, row_l, alpha);
        for (std::int64_t i = 0; i < qn; ++i) {
          if (alpha[i] != T(1)) {
            T* ai = ag + i * D;
            const T a = alpha[i];
#pragma omp simd
            for (std::int64_t c = 0; c < D; ++c) ai[c] *= a;
          }
        }
        tiles.pv(g, qn, kn, s, ag);  // acc += p v
      }
    }

    for (std::int64_t g = 0; g < group; ++g) {
      const std::int64_t h = hk * group + g;
      const T *row_m = stats + g * 2 * TQ, *row_l = row_m + TQ, *ag = acc + g * qn * D;
      for (std::int64_t i = 0; i < qn; ++i) {
        T* o = out + (b * d.tq + q0 + i) * st.o + h * D;
        if (i + kPrefetchRows < qn) prefetch_row<1>(o + kPrefetchRows * st.o, D);
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
// packed once per task (by the Tiles policy).
template <class Tiles>
HERD_CPU_CLONES void attention_backward_tiled(const AttentionDims& d, const AttentionMask& m,
                                              const typename Tiles::In* q, const typename Tiles::In* k,
                                              const typename Tiles::In* v, const typename Tiles::In* out,
                                              const typename Tiles::T* lse, const typename Tiles::T* dout,
                                              typename Tiles::T* dq, typename Tiles::T* dk, typename Tiles::T* dv) {
  using T = typename Tiles::T;
  check_dims(d, m);
  const Strides st = strides_of(d);
  const std::int64_t D = d.head_dim, group = d.q_heads / d.kv_heads;
  const std::int64_t tasks = d.batch * d.kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(D)));
  const bool threaded = worth_threads(d);
  constexpr std::int64_t TQ = kAttnTileQ, TK = kAttnTileK;

#pragma omp parallel for schedule(dynamic, 1) if (threaded)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t hk = task % d.kv_heads, b = task / d.kv_heads;
    const std::int64_t h0 = hk * group;
    // Q and dO of the task's heads (re-reading them strided for every key tile costs more than the
    // arithmetic), K and V tiles in the layouts of the policy's matmuls.
    typename Tiles::Backward tiles(group, D, d.tq);
    T* dk_acc = cpu::thread_scratch<T, 0>(2 * TK * D);  // (kn, D)
    T* dv_acc = dk_acc + TK * D;                        // (kn, D)
    T* p = cpu::thread_scratch<T, 1>(2 * TQ * TK);      // (qn, kn) P, then dP / dS
    T* dp = p + TQ * TK;
    T* delta = cpu::thread_scratch<T, 2>(static_cast<std::size_t>(group * d.tq));         // (group, Tq)
    T* dq_local = cpu::thread_scratch<T, 3>(static_cast<std::size_t>(group * d.tq * D));  // (group, Tq, D)

    // delta_i = dO_i . O_i per query row, dO as the matmuls see it.
    for (std::int64_t g = 0; g < group; ++g) {
      for (std::int64_t i = 0; i < d.tq; ++i) {
        const typename Tiles::In* o = out + (b * d.tq + i) * st.o + (h0 + g) * D;
        const T* go = dout + (b * d.tq + i) * st.o + (h0 + g) * D;
        if (i + kPrefetchRows < d.tq) {  // and the query row, which the packers read next
          prefetch_row(o + kPrefetchRows * st.o, D);
          prefetch_row(go + kPrefetchRows * st.o, D);
          prefetch_row(q + (b * d.tq + i + kPrefetchRows) * st.q + (h0 + g) * D, D);
        }
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (std::int64_t c = 0; c < D; ++c) sum += widen(o[c]) * Tiles::matmul_input(go[c]);
        delta[g * d.tq + i] = sum;
      }
      tiles.queries(g, q + b * d.tq * st.q + (h0 + g) * D, st.q, dout + b * d.tq * st.o + (h0 + g) * D, st.o);
    }
    std::fill(dq_local, dq_local + group * d.tq * D, T(0));

    for (std::int64_t k0 = 0; k0 < d.tk; k0 += TK) {
      const std::int64_t kn = std::min(TK, d.tk - k0);
      const std::int32_t* pk = m.pos_k + b * d.tk + k0;
      const std::int32_t* dkd = m.doc_k ? m.doc_k + b * d.tk + k0 : nullptr;
      const Span kspan = span_of(pk, dkd, kn);
      tiles.keys_values(k + (b * d.tk + k0) * st.k + hk * D, st.k, v + (b * d.tk + k0) * st.v + hk * D, st.v, kn);
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
          tiles.scores(g, q0, qn, kn, p);  // unscaled scores
          if (tm == TileMask::kPartial) apply_mask(p, qn, kn, pq, dqd, pk, dkd);
          tiles.probabilities(p, qn, kn, scale, lse + (b * d.q_heads + h) * d.tq + q0);
          tiles.dv(g, q0, qn, kn, p, dv_acc);  // dV += P^T dO
          tiles.dp(g, q0, qn, kn, dp);         // dP = dO V^T
          // dS = P (dP - delta), then dK += scale dS^T Q, dQ += scale dS K
          tiles.ds_dk_dq(g, q0, qn, kn, p, dp, delta + g * d.tq + q0, scale, dk_acc, dq_local + (g * d.tq + q0) * D);
        }
      }
      unpack_rows(dk_acc, kn, D, dk + (b * d.tk + k0) * st.k + hk * D, st.k);
      unpack_rows(dv_acc, kn, D, dv + (b * d.tk + k0) * st.v + hk * D, st.v);
    }
    for (std::int64_t g = 0; g < group; ++g)
      unpack_rows(dq_local + g * d.tq * D, d.tq, D, dq + b * d.tq * st.q + (h0 + g) * D, st.q);
  }
}

}  // namespace
}  // namespace herd::kernels

namespace herd::kernels::detail {

// The bf16 kernel on operands widened to fp32 and tile_gemm<float> (attention.cpp): the path of a CPU
// without AVX512_BF16, and the one set_bf16_attention_path(kConverted) forces.
void attention_forward_widened(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k,
                               const bf16* v, float* out, float* lse);
void attention_backward_widened(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k,
                                const bf16* v, const bf16* out, const float* lse, const float* dout, float* dq,
                                float* dk, float* dv);

}  // namespace herd::kernels::detail
