// The bf16 micro-GEMM of attention's tiles (bf16 inputs, fp32 sums) and the packers that lay its
// operands out, for CPUs with AVX512_BF16 (vdpbf16ps). kernels/cpu/attention_bf16.cpp uses them; on a
// CPU without the instruction it takes the fp32 micro-GEMM (tile_gemm.h) on widened operands instead.
//
// vdpbf16ps multiplies pairs: for each of 16 fp32 lanes, acc += a.hi * b.hi + a.lo * b.lo, where a and
// b are 32-bit words each holding two bf16 values (the element of even index in the low half). So both
// operands are stored as pairs along the reduction index k ("VNNI" layout):
//   A (m, k): the pair (A[i][2p], A[i][2p+1]) is the word a[i * a_is + p * a_ps]; two strides, so a
//             row-major A (a_is = k/2, a_ps = 1) and one packed by pairs of rows (a_is = 1, a_ps = m)
//             serve alike, the latter being how P^T and dS^T are fed without a transpose.
//   B (k, n): the pair (B[2p][j], B[2p+1][j]) is the word b[p * ldb + j]: rows 2p and 2p+1 interleaved.
// An odd k is padded with a zero pair half on both sides (the packers write it), so kp = ceil(k / 2).
//
// Register blocking: 8 rows of A by 2 vectors of 16 columns: 16 zmm accumulators, 2 B vectors and one
// broadcast A word, 19 of the 32 registers. Per pair step: 2 loads of B, 8 broadcasts of A (embedded
// in the instruction) and 16 vdpbf16ps, each 32 bf16 multiply-adds: 512 multiply-adds for 10 loads.
// 16 independent accumulators cover the instruction's latency (about 6 cycles) at 2 per cycle. Row and
// column tails use blocks of 4, 2 and 1 rows and masked loads and stores (no scalar code).
//
// Numerics: the products of two bf16 values are exact in fp32; vdpbf16ps adds them to the accumulator
// with round-to-nearest-even, treats subnormal inputs as zero and flushes subnormal results to zero
// (a value below 1.2e-38, far under any tolerance of attention). The rounding packers from fp32 use
// vcvtne2ps2bf16: nearest-even like core/bf16.h, except that subnormal inputs become zero, which the
// multiply would have done anyway.
#pragma once

#include <cstdint>

#include "herd/core/bf16.h"

namespace herd::kernels::cpu {

// Whether this CPU (and build) has vdpbf16ps: AVX512_BF16 on x86-64 (cpu_features.h).
bool have_dpbf16();

// C (m, n) (+)= A (m, k) B (k, n) in the pair layouts above, kp = ceil(k / 2) pairs; c row-major with
// row stride ldc. Needs have_dpbf16(). Runs on AMX tiles where tile_gemm_isa() says so
// (tile_gemm_amx.cpp), else on vdpbf16ps.
void tile_gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a, std::int64_t a_is,
                    std::int64_t a_ps, const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc,
                    bool accumulate);

// The same product on AMX tiles (TDPBF16PS; tile_gemm_amx.cpp). Needs have_amx_tiles().
void tile_gemm_amx(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a, std::int64_t a_is,
                   std::int64_t a_ps, const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc,
                   bool accumulate);
// Keeps the AMX tile configuration loaded on this thread while it lives, so that the tile_gemm_bf16
// calls inside skip loading it and releasing the tiles at every call (about a tenth of a 64 x 64 x 64
// product). Does nothing where the micro-GEMM is not on AMX. Only the micro-GEMM may run on the
// thread meanwhile: oneDNN's AMX kernels load a configuration of their own.
class AmxTileScope {
 public:
  AmxTileScope();
  ~AmxTileScope();
  AmxTileScope(const AmxTileScope&) = delete;
  AmxTileScope& operator=(const AmxTileScope&) = delete;

 private:
  bool held_ = false;
};

// Whether this CPU has AMX-BF16 and Linux granted this process the tile state (asked on first call).
bool have_amx_tiles();
// The instructions tile_gemm_bf16 uses: kAuto is AMX where have_amx_tiles(), else vdpbf16ps.
enum class TileGemmIsa { kAuto, kAvx512Bf16, kAmx };
void set_tile_gemm_isa(TileGemmIsa isa);
TileGemmIsa tile_gemm_isa();  // what kAuto resolves to (never kAuto)

// Packers into pairs, each from x (rows, cols) with row stride ld. "Down": pairs of consecutive rows,
// dst (ceil(rows / 2), cols) with dst[p * cols + j] = (x[2p][j], x[2p + 1][j]): a B operand, or an A
// operand read with a_is = 1, a_ps = cols. "Across": pairs of consecutive columns, dst (rows,
// ceil(cols / 2)) with row stride ld_dst: a row-major A operand. "Transposed": pairs of consecutive
// columns, transposed, dst (ceil(cols / 2), rows) with dst[p * rows + j] = (x[j][2p], x[j][2p + 1]):
// the B operand of x^T. A missing partner (odd rows or cols) is zero. The fp32 versions round to bf16.
void pack_pairs_down(const float* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst);
void pack_pairs_across(const float* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                       std::int64_t ld_dst);
void pack_pairs_down(const bf16* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst);
void pack_pairs_across(const bf16* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                       std::int64_t ld_dst);
void pack_pairs_transposed(const bf16* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst);

// dst (16 x 16 words, row stride 16) := the transpose of x's 16 x 16 words (row stride ld), in registers.
// Needs have_dpbf16(); the AMX micro-GEMM's packer for an A given by pairs of rows (tile_gemm_amx.cpp).
void transpose_words16(const std::uint32_t* x, std::int64_t ld, std::uint32_t* dst);

// Attention's dS, computed and packed in one pass: ds[i][j] = p[i][j] (dp[i][j] - delta[i]) scale in
// fp32 (p, dp (rows, cols) with row stride ld), rounded to bf16 and packed both down (dst_down) and
// across (dst_across, row stride ld_across), as the two packers above would.
void pack_scaled_ds(const float* p, const float* dp, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                    const float* delta, float scale, std::uint32_t* dst_down, std::uint32_t* dst_across,
                    std::int64_t ld_across);

// Attention's online softmax step (attention_impl.h's online_softmax<float, true>, bit for bit) on
// the unscaled scores s^T (kn, qn), with P written rounded and packed down (pack_pairs_down of P,
// (ceil(kn / 2), qn) pairs) into `pairs` instead of into s: one pass over s after its max, with the
// running statistics of each 16 queries in registers. row_m, row_l, alpha (qn) as online_softmax.
void online_softmax_pairs(const float* s, std::int64_t kn, std::int64_t qn, float scale, float* row_m, float* row_l,
                          float* alpha, std::uint32_t* pairs);

// The backward's recomputed P (attention_impl.h's recomputed_probabilities<float>, bit for bit) in
// place on the unscaled scores p (qn, kn), and rounded and packed down (pack_pairs_down of P,
// (ceil(qn / 2), kn) pairs) into `pairs`, in one pass.
void recomputed_probabilities_pairs(float* p, std::int64_t qn, std::int64_t kn, float scale, const float* lse,
                                    std::uint32_t* pairs);

}  // namespace herd::kernels::cpu
