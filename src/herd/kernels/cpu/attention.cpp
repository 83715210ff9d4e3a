// Flash-style attention on the CPU: forward with an online softmax, backward recomputing the scores
// from the saved log-sum-exp (FlashAttention-2, Dao 2023). Contracts and layout: attention.h; the
// kernels' body (tiling, masks, tile skipping, task split): attention_impl.h. This file has the tiles
// of the fp32 and fp64 kernels, whose matmuls are tile_gemm<T> (tile_gemm.h), and the same tiles on
// widened bf16 inputs: the bf16 kernel's path on a CPU without AVX512_BF16 (attention_bf16.cpp).
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

#include "herd/kernels/cpu/attention_impl.h"

namespace herd::kernels {

namespace {

// The tiles of the fp32 and fp64 kernels (In = T), and of the bf16 kernel on a CPU without
// AVX512_BF16 (In = bf16, T = float): operands packed in T, multiplied by tile_gemm<T>. For bf16 the
// packing widens (exact), and the matmul inputs the kernel computes (P, dS, dO) are rounded to bf16
// values first, so every product is one the vdpbf16ps path forms too, summed in another order.
template <typename InT, typename AccT>
struct FloatTiles {
  using In = InT;
  using T = AccT;
  static constexpr bool kBf16 = std::is_same_v<In, bf16>;
  // fp32 and fp64 fold the scale into the query tile (as they always have); bf16 puts it on the fp32
  // scores, since q * scale would be rounded again.
  static constexpr bool kScaleScores = kBf16;
  static T matmul_input(T x) {
    if constexpr (kBf16) return herd::round_to_bf16(x);
    return x;
  }

  struct Forward {
    std::int64_t D;
    T* qts;  // (group, D, qn) query tiles, transposed
    T* kc;   // (kn, D) keys
    T* vc;   // (kn, D) values
    Forward(std::int64_t group, std::int64_t dim)
        : D(dim),
          qts(cpu::thread_scratch<T, 0>(group * dim * kAttnTileQ)),
          kc(cpu::thread_scratch<T, 2>(2 * kAttnTileK * dim)),
          vc(kc + kAttnTileK * dim) {}
    void queries(std::int64_t g, const In* src, std::int64_t ld, std::int64_t qn, T scale) {
      T* qg = qts + g * D * qn;
      for (std::int64_t i = 0; i < qn; ++i) {
        const In* si = src + i * ld;
        if constexpr (kBf16) {
          for (std::int64_t c = 0; c < D; ++c) qg[c * qn + i] = widen(si[c]);
        } else {
          for (std::int64_t c = 0; c < D; ++c) qg[c * qn + i] = si[c] * scale;
        }
      }
    }
    void keys_values(const In* k, std::int64_t ldk, const In* v, std::int64_t ldv, std::int64_t kn) {
      pack_rows(k, ldk, kn, D, kc);
      pack_rows(v, ldv, kn, D, vc);
    }
    void scores(std::int64_t g, std::int64_t kn, std::int64_t qn, T* s) {
      cpu::tile_gemm<T>(kn, qn, D, kc, D, 1, qts + g * D * qn, qn, s, qn, false);
    }
    void softmax(T* s, std::int64_t kn, std::int64_t qn, T scale, T* row_m, T* row_l, T* alpha) {
      online_softmax<T, kScaleScores>(s, kn, qn, scale, row_m, row_l, alpha);
      if constexpr (kBf16) round_rows(s, kn * qn);  // P as the matmul sees it; l summed the unrounded P
    }
    void pv(std::int64_t, std::int64_t qn, std::int64_t kn, const T* s, T* ag) {
      cpu::tile_gemm<T>(qn, D, kn, s, 1, qn, vc, D, ag, D, true);
    }
  };

  struct Backward {
    std::int64_t D, tq;
    T *kc, *vc, *kt, *vt;  // (kn, D) x2, (D, kn) x2
    T *q_all, *go_all;     // (group, Tq, D) each
    T* pr;                 // (qn, kn) P rounded (bf16 only)
    Backward(std::int64_t group, std::int64_t dim, std::int64_t t)
        : D(dim),
          tq(t),
          kc(cpu::thread_scratch<T, 5>(4 * kAttnTileK * dim)),
          vc(kc + kAttnTileK * dim),
          kt(vc + kAttnTileK * dim),
          vt(kt + kAttnTileK * dim),
          q_all(cpu::thread_scratch<T, 6>(static_cast<std::size_t>(2 * group * t * dim))),
          go_all(q_all + group * t * dim),
          pr(kBf16 ? cpu::thread_scratch<T, 7>(kAttnTileQ * kAttnTileK) : nullptr) {}
    void queries(std::int64_t g, const In* q, std::int64_t ldq, const T* dout, std::int64_t ldo) {
      pack_rows(q, ldq, tq, D, q_all + g * tq * D);
      if constexpr (kBf16) {
        pack_rows_rounded(dout, ldo, tq, D, go_all + g * tq * D);
      } else {
        pack_rows(dout, ldo, tq, D, go_all + g * tq * D);
      }
    }
    void keys_values(const In* k, std::int64_t ldk, const In* v, std::int64_t ldv, std::int64_t kn) {
      pack_rows(k, ldk, kn, D, kc);
      pack_rows(v, ldv, kn, D, vc);
      transpose_rows(kc, D, kn, D, kt);
      transpose_rows(vc, D, kn, D, vt);
    }
    void scores(std::int64_t g, std::int64_t q0, std::int64_t qn, std::int64_t kn, T* p) {
      cpu::tile_gemm<T>(qn, kn, D, q_all + (g * tq + q0) * D, D, 1, kt, kn, p, kn, false);
    }
    void probabilities(T* p, std::int64_t qn, std::int64_t kn, T scale, const T* lse) {
      recomputed_probabilities(p, qn, kn, scale, lse);
    }
    void dv(std::int64_t g, std::int64_t q0, std::int64_t qn, std::int64_t kn, const T* p, T* dv_acc) {
      if constexpr (kBf16) {
        round_rows(p, qn * kn, pr);
        p = pr;
      }
      cpu::tile_gemm<T>(kn, D, qn, p, 1, kn, go_all + (g * tq + q0) * D, D, dv_acc, D, true);
    }
    void dp(std::int64_t g, std::int64_t q0, std::int64_t qn, std::int64_t kn, T* dp) {
      cpu::tile_gemm<T>(qn, kn, D, go_all + (g * tq + q0) * D, D, 1, vt, kn, dp, kn, false);
    }
    void ds_dk_dq(std::int64_t g, std::int64_t q0, std::int64_t qn, std::int64_t kn, const T* p, T* ds, const T* delta,
                  T scale, T* dk_acc, T* dq_g) {
      scaled_ds(p, ds, delta, qn, kn, scale);
      if constexpr (kBf16) round_rows(ds, qn * kn);
      cpu::tile_gemm<T>(kn, D, qn, ds, 1, kn, q_all + (g * tq + q0) * D, D, dk_acc, D, true);
      cpu::tile_gemm<T>(qn, D, kn, ds, kn, 1, kc, D, dq_g, D, true);
    }
  };
};

}  // namespace

template <typename T>
void attention_forward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v, T* out,
                       T* lse) {
  attention_forward_tiled<FloatTiles<T, T>>(d, m, q, k, v, out, lse);
}

template <typename T>
void attention_backward(const AttentionDims& d, const AttentionMask& m, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv) {
  attention_backward_tiled<FloatTiles<T, T>>(d, m, q, k, v, out, lse, dout, dq, dk, dv);
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

namespace detail {

void attention_forward_widened(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k,
                               const bf16* v, float* out, float* lse) {
  attention_forward_tiled<FloatTiles<bf16, float>>(d, m, q, k, v, out, lse);
}

void attention_backward_widened(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k,
                                const bf16* v, const bf16* out, const float* lse, const float* dout, float* dq,
                                float* dk, float* dv) {
  attention_backward_tiled<FloatTiles<bf16, float>>(d, m, q, k, v, out, lse, dout, dq, dk, dv);
}

}  // namespace detail

}  // namespace herd::kernels
