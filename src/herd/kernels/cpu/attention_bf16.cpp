// Flash attention with bf16 inputs and fp32 sums (attention.h), on the body the fp32 kernel uses
// (attention_impl.h: tiling, masks, skipping, task split, scratch). Its tile matmuls run vdpbf16ps
// where the CPU has AVX512_BF16 (Dpbf16Tiles below, tile_gemm_bf16.h), else the fp32 micro-GEMM on
// widened operands (attention.cpp's FloatTiles<bf16, float>), the same products in another order.
//
// Numerics, as FlashAttention-2's and PyTorch's bf16 SDPA kernels:
//   forward   S = Q K^T from the bf16 q and k, fp32 sums; S * scale (1/sqrt(D)) in fp32, inside the
//             exponent's FMA (not folded into q, which would round q * scale again); running max, exponentials and
//             their sum l in fp32; P rounded to bf16 for P V, fp32 sums; l sums the unrounded P; out = acc / l and lse
//             = m + log l in fp32.
//   backward  dO rounded to bf16 (as it is packed; delta = rowsum(dO O) uses the same rounded dO and
//             the saved bf16 O, fp32 sum); S and P recomputed as above; dV += bf16(P)^T dO;
//             dP = dO V^T; dS = P (dP - delta) in fp32 from the unrounded P; bf16(scale dS) for
//             dK += dS^T Q and dQ += dS K; every sum fp32, dq, dk, dv written in fp32.
// A product of two bf16 values is exact in fp32, so each matmul is the fp32 matmul of its rounded
// inputs, and the error is that of the roundings (u = 2^-8 each) plus fp32 sums (k 2^-24, k <= Tk):
//   lse        no rounding before it: fp32 error only (q, k are the bf16 inputs themselves);
//   out        |err| <= u sum_j P_ij |v_j| / l_i + fp32 <= u max|v| (P's rounding);
//   dv         two rounded factors (P, dO): <= 2u sum_i P_ij |dO_i|;
//   dq, dk     dO's rounding through dP and delta, then dS's own: about 3u of sum_j |dS_ij| |k_j|;
// relative to each tensor's largest element, with random signs, out comes out near u/3, dv near u/2
// and dq, dk near u (the tests hold them to 2u, 3u and 4u; docs/precision.md). Summing in bf16 instead would cost up to
// Tk u, and not rounding P (or dS) would make the result the fp32 kernel's: tests/kernels/attention_bf16_test.cpp tells
// both apart from this recipe.
#include <atomic>

#include "herd/kernels/attention.h"
#include "herd/kernels/cpu/attention_impl.h"
#include "herd/kernels/cpu/tile_gemm_bf16.h"

namespace herd::kernels {

namespace {

using cpu::pack_pairs_across;
using cpu::pack_pairs_down;
using cpu::pack_pairs_transposed;
using cpu::tile_gemm_bf16;

constexpr std::int64_t pairs(std::int64_t n) { return (n + 1) / 2; }

// Operands as bf16 pairs along each matmul's reduction index (tile_gemm_bf16.h): a B operand with
// rows 2p and 2p + 1 interleaved ("down"), an A operand row-major ("across", a_is = k/2, a_ps = 1) or
// in pairs of rows (a_is = 1, a_ps = m), which is how P^T and dS^T are fed without a transpose.
// Q, K and V come in bf16 and are only rearranged; P, dS and dO are rounded as they are packed.
struct Dpbf16Tiles {
  using In = bf16;
  using T = float;
  static constexpr bool kScaleScores = true;
  static float matmul_input(float x) { return herd::round_to_bf16(x); }

  struct Forward {
    std::int64_t D, D2;
    std::uint32_t* qv;        // (group, D2, qn): Q^T by pairs of q's columns, the B of s^T = K Q^T
    std::uint32_t* kr;        // (kn, D2): K row-major, the A of s^T
    std::uint32_t* vv;        // (kn2, D): V by pairs of rows, the B of P V
    std::uint32_t* pp;        // (kn2, qn): P^T's rows (s^T) by pairs, P as an A with a_is = 1, a_ps = qn
    cpu::AmxTileScope tiles;  // the task's micro-GEMMs share one tile configuration
    Forward(std::int64_t group, std::int64_t dim)
        : D(dim),
          D2(pairs(dim)),
          qv(cpu::thread_scratch<std::uint32_t, 0>(group * D2 * kAttnTileQ)),
          kr(cpu::thread_scratch<std::uint32_t, 1>(kAttnTileK * D2 + pairs(kAttnTileK) * dim)),
          vv(kr + kAttnTileK * D2),
          pp(cpu::thread_scratch<std::uint32_t, 2>(pairs(kAttnTileK) * kAttnTileQ)) {}
    void queries(std::int64_t g, const bf16* src, std::int64_t ld, std::int64_t qn, float) {
      pack_pairs_transposed(src, ld, qn, D, qv + g * D2 * qn);
    }
    void keys_values(const bf16* k, std::int64_t ldk, const bf16* v, std::int64_t ldv, std::int64_t kn) {
      pack_pairs_across(k, ldk, kn, D, kr, D2);
      pack_pairs_down(v, ldv, kn, D, vv);
    }
    void scores(std::int64_t g, std::int64_t kn, std::int64_t qn, float* s) {
      tile_gemm_bf16(kn, qn, D2, kr, D2, 1, qv + g * D2 * qn, qn, s, qn, false);
    }
    // One pass: the exponentials go straight into the matmul's pairs (s is left as it was).
    void softmax(float* s, std::int64_t kn, std::int64_t qn, float scale, float* row_m, float* row_l, float* alpha) {
      cpu::online_softmax_pairs(s, kn, qn, scale, row_m, row_l, alpha, pp);
    }
    void pv(std::int64_t, std::int64_t qn, std::int64_t kn, const float*, float* ag) {
      tile_gemm_bf16(qn, D, pairs(kn), pp, 1, qn, vv, D, ag, D, true);
    }
  };

  // Q and dO of the task's heads in both layouts each matmul wants, for the whole sequence (the query
  // tiles start at multiples of 64, so a tile's pairs of rows are the sequence's); K, K^T and V^T per
  // key tile; P^T, dS^T and dS per tile pair.
  struct Backward {
    std::int64_t D, D2, tq, tq2;
    std::uint32_t *q_r, *g_r;  // (group, Tq, D2): Q and dO row-major, the A of Q K^T and dO V^T
    std::uint32_t *q_v, *g_v;  // (group, Tq2, D): by pairs of rows, the B of dS^T Q and P^T dO
    std::uint32_t* k_v;        // (kn2, D): K by pairs of rows, the B of dS K
    std::uint32_t *k_t, *v_t;  // (D2, kn): K^T and V^T, the B of Q K^T and dO V^T
    std::uint32_t* p_t;        // (qn2, kn): P by pairs of rows, P^T as an A (a_is = 1, a_ps = kn)
    std::uint32_t* ds_t;       // (qn2, kn): dS the same way, for dS^T Q
    std::uint32_t* ds_r;       // (qn, kn2): dS row-major, for dS K
    cpu::AmxTileScope tiles;   // the task's micro-GEMMs share one tile configuration
    Backward(std::int64_t group, std::int64_t dim, std::int64_t t) : D(dim), D2(pairs(dim)), tq(t), tq2(pairs(t)) {
      const std::int64_t q_words = group * (tq * D2 + tq2 * D);
      q_r = cpu::thread_scratch<std::uint32_t, 3>(static_cast<std::size_t>(2 * q_words));
      q_v = q_r + group * tq * D2;
      g_r = q_v + group * tq2 * D;
      g_v = g_r + group * tq * D2;
      constexpr std::int64_t TK = kAttnTileK, TQ2 = pairs(kAttnTileQ);
      k_v = cpu::thread_scratch<std::uint32_t, 4>(pairs(TK) * D + 2 * D2 * TK + 2 * TQ2 * TK + kAttnTileQ * pairs(TK));
      k_t = k_v + pairs(TK) * D;
      v_t = k_t + D2 * TK;
      p_t = v_t + D2 * TK;
      ds_t = p_t + TQ2 * TK;
      ds_r = ds_t + TQ2 * TK;
    }
    void queries(std::int64_t g, const bf16* q, std::int64_t ldq, const float* dout, std::int64_t ldo) {
      pack_pairs_across(q, ldq, tq, D, q_r + g * tq * D2, D2);
      pack_pairs_down(q, ldq, tq, D, q_v + g * tq2 * D);
      pack_pairs_across(dout, ldo, tq, D, g_r + g * tq * D2, D2);
      pack_pairs_down(dout, ldo, tq, D, g_v + g * tq2 * D);
    }
    void keys_values(const bf16* k, std::int64_t ldk, const bf16* v, std::int64_t ldv, std::int64_t kn) {
      pack_pairs_down(k, ldk, kn, D, k_v);
      pack_pairs_transposed(k, ldk, kn, D, k_t);
      pack_pairs_transposed(v, ldv, kn, D, v_t);
    }
    void scores(std::int64_t g, std::int64_t q0, std::int64_t qn, std::int64_t kn, float* p) {
      tile_gemm_bf16(qn, kn, D2, q_r + (g * tq + q0) * D2, D2, 1, k_t, kn, p, kn, false);
    }
    // P in fp32 for dS, and rounded by pairs of rows into p_t for dV, in one pass.
    void probabilities(float* p, std::int64_t qn, std::int64_t kn, float scale, const float* lse) {
      cpu::recomputed_probabilities_pairs(p, qn, kn, scale, lse, p_t);
    }
    void dv(std::int64_t g, std::int64_t q0, std::int64_t qn, std::int64_t kn, const float*, float* dv_acc) {
      tile_gemm_bf16(kn, D, pairs(qn), p_t, 1, kn, g_v + (g * tq2 + q0 / 2) * D, D, dv_acc, D, true);
    }
    void dp(std::int64_t g, std::int64_t q0, std::int64_t qn, std::int64_t kn, float* dp) {
      tile_gemm_bf16(qn, kn, D2, g_r + (g * tq + q0) * D2, D2, 1, v_t, kn, dp, kn, false);
    }
    void ds_dk_dq(std::int64_t g, std::int64_t q0, std::int64_t qn, std::int64_t kn, const float* p, const float* dp,
                  const float* delta, float scale, float* dk_acc, float* dq_g) {
      cpu::pack_scaled_ds(p, dp, kn, qn, kn, delta, scale, ds_t, ds_r, pairs(kn));
      tile_gemm_bf16(kn, D, pairs(qn), ds_t, 1, kn, q_v + (g * tq2 + q0 / 2) * D, D, dk_acc, D, true);
      tile_gemm_bf16(qn, D, pairs(kn), ds_r, pairs(kn), 1, k_v, D, dq_g, D, true);
    }
  };
};

std::atomic<Bf16AttentionPath> g_path{Bf16AttentionPath::kAuto};

bool use_dpbf16() {
  const Bf16AttentionPath p = g_path.load(std::memory_order_relaxed);
  if (p == Bf16AttentionPath::kConverted) return false;
  HERD_CHECK(p == Bf16AttentionPath::kAuto || cpu::have_dpbf16(),
             "bf16 attention: the vdpbf16ps path was asked for on a CPU without AVX512_BF16");
  return cpu::have_dpbf16();
}

}  // namespace

void set_bf16_attention_path(Bf16AttentionPath p) { g_path.store(p); }

Bf16AttentionPath bf16_attention_path() {
  return use_dpbf16() ? Bf16AttentionPath::kDpbf16 : Bf16AttentionPath::kConverted;
}

const char* bf16_attention_description() {
  if (use_dpbf16()) {
    return cpu::tile_gemm_isa() == cpu::TileGemmIsa::kAmx ? "AMX tiles (amx_bf16)" : "vdpbf16ps (avx512_bf16)";
  }
#if defined(HERD_CPU_FORCED)
  if (!cpu::have_dpbf16())
    return "converted to fp32 (no avx512_bf16 at this build's level, HERD_CPU_ISA=" HERD_CPU_FORCED ")";
#endif
  if (!cpu::have_dpbf16()) return "converted to fp32 (no avx512_bf16 on this CPU)";
  return "converted to fp32 (set by the caller)";
}

void attention_forward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                       float* out, float* lse) {
  if (use_dpbf16()) {
    attention_forward_tiled<Dpbf16Tiles>(d, m, q, k, v, out, lse);
  } else {
    detail::attention_forward_widened(d, m, q, k, v, out, lse);
  }
}

void attention_backward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  if (use_dpbf16()) {
    attention_backward_tiled<Dpbf16Tiles>(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  } else {
    detail::attention_backward_widened(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  }
}

}  // namespace herd::kernels
