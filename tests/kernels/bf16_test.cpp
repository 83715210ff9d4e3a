// bf16 conversions and the bf16 GEMM (kernels/convert.h, kernels/gemm.h) against their specs: the
// buffer converters round exactly as core/bf16.h's scalar function does (special values, ties,
// subnormals, random bit patterns), and gemm_bf16 on every path this machine has (oneDNN's matmul
// where the CPU has bf16 instructions, the converted fp32 path everywhere) matches the double-summed
// reference on widened inputs, for every transpose pair, alpha/beta, padded strides and GEMMs split
// across threads. Under qemu without AVX-512 (ctest kernels_isa.*) only the converted path runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "herd/kernels/convert.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/embedding.h"
#include "herd/kernels/gemm.h"
#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, ScalarRoundingIsNearestEvenOnTheBitPattern) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1); 1 + 3 x 2^-8 to 1 + 2^-6.
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // just above the tie: up
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // past the largest bf16: infinity
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001u)))));  // a NaN never rounds to inf
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000u)), 0x0002);  // a subnormal tie, rounded to even (not flushed)
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);               // widening is exact
}

TEST(Bf16, BufferConvertersRoundAsTheScalarDoes) {
  std::mt19937 rng(5);
  std::vector<float> x(300001);  // odd: a vector tail; large: the OpenMP split
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = from_bits(static_cast<std::uint32_t>(rng()));
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f + 0x1p-8f,
                            from_bits(0x00018000u),
                            from_bits(0x7f800001u),
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min()};
  for (std::size_t i = 0; i < std::size(specials); ++i) x[i] = specials[i];
  std::vector<bf16> h(x.size());
  to_bf16(x.data(), static_cast<std::int64_t>(x.size()), h.data());
  std::vector<float> w(x.size());
  to_float(h.data(), static_cast<std::int64_t>(h.size()), w.data());
  std::vector<float> r = x;
  std::vector<bf16> rh(x.size());
  round_to_bf16(r.data(), static_cast<std::int64_t>(r.size()), rh.data());
  std::vector<float> r2 = x;
  round_to_bf16(r2.data(), static_cast<std::int64_t>(r2.size()), nullptr);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::uint16_t want = float_to_bf16(x[i]);
    ASSERT_EQ(h[i].bits, want) << i;
    ASSERT_EQ(rh[i].bits, want) << i;
    std::uint32_t wb, rb, r2b, expect = static_cast<std::uint32_t>(want) << 16;
    std::memcpy(&wb, &w[i], 4);
    std::memcpy(&rb, &r[i], 4);
    std::memcpy(&r2b, &r2[i], 4);
    ASSERT_EQ(wb, expect) << i;
    ASSERT_EQ(rb, expect) << i;
    ASSERT_EQ(r2b, expect) << i;
  }
}

// Random values already on the bf16 grid, so the reference sees exactly what the kernel sees.
std::vector<bf16> random_bf16(std::int64_t n, std::uint32_t seed) {
  const std::vector<float> f = testing::random_vec<float>(n, seed);
  std::vector<bf16> h(f.size());
  to_bf16(f.data(), n, h.data());
  return h;
}

double bf16_gemm_error(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, float beta,
                       std::int64_t pad) {
  const std::int64_t a_rows = ta == Trans::kNo ? m : k, a_cols = ta == Trans::kNo ? k : m;
  const std::int64_t b_rows = tb == Trans::kNo ? k : n, b_cols = tb == Trans::kNo ? n : k;
  const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  const std::vector<bf16> a = random_bf16(a_rows * lda, 1), b = random_bf16(b_rows * ldb, 2);
  std::vector<float> c = testing::random_vec<float>(m * ldc, 3), c_ref = c;
  gemm_bf16(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  gemm_bf16_reference(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c_ref.data(), ldc);
  return testing::rel_error(c, c_ref);
}

std::vector<Bf16GemmPath> bf16_paths() {
  std::vector<Bf16GemmPath> p = {Bf16GemmPath::kConverted};
  if (have_onednn() && cpu_has_bf16()) p.push_back(Bf16GemmPath::kOneDNN);
  return p;
}

// fp32 sums of exact products: the difference from the double-summed reference is fp32 rounding of
// k-term sums (k <= 160 here), far below bf16's 2^-8.
TEST(Bf16Gemm, EveryPathTransposeAndStrideMatchesTheReference) {
  for (Bf16GemmPath path : bf16_paths()) {
    set_bf16_gemm_path(path);
    SCOPED_TRACE(bf16_gemm_description());
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        EXPECT_LT(bf16_gemm_error(ta, tb, 37, 29, 53, 1.0f, 0.0f, 0), 1e-5);
        EXPECT_LT(bf16_gemm_error(ta, tb, 64, 17, 5, 0.5f, 1.0f, 3), 1e-5);
        EXPECT_LT(bf16_gemm_error(ta, tb, 13, 71, 40, -2.0f, 0.25f, 7), 1e-5);
      }
    }
  }
  set_bf16_gemm_path(Bf16GemmPath::kAuto);
}

TEST(Bf16Gemm, SplitAcrossThreadsMatchesTheReference) {
  const int threads = num_threads();
  set_num_threads(2);
  for (Bf16GemmPath path : bf16_paths()) {
    set_bf16_gemm_path(path);
    SCOPED_TRACE(bf16_gemm_description());
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        EXPECT_LT(bf16_gemm_error(ta, tb, 301, 130, 70, 1.0f, 0.0f, 0), 1e-5);  // rows split
        EXPECT_LT(bf16_gemm_error(ta, tb, 40, 333, 160, 0.5f, 1.0f, 5), 1e-5);  // columns split, ragged
      }
    }
  }
  set_bf16_gemm_path(Bf16GemmPath::kAuto);
  set_num_threads(threads);
}

// A weight gradient (A transposed, k the tokens) past 512 k runs as chunks of 512 added into C
// on oneDNN's path (kernels/cpu/gemm.cpp, kKChunk): it matches the reference on every path at one and
// two threads, split along rows and, with few rows, along columns; and on oneDNN's path at one thread
// it is, bit for bit, the chunks called one by one (the caller's beta on the first, 1 after), so a wrong
// offset, beta or ragged last chunk shows. (The converted path widens the whole of A and B: no chunks.)
TEST(Bf16Gemm, WeightGradientInKChunksMatchesTheReferenceAndTheChunksCalledInTurn) {
  const int threads = num_threads();
  for (Bf16GemmPath path : bf16_paths()) {
    set_bf16_gemm_path(path);
    SCOPED_TRACE(bf16_gemm_description());
    for (int t : {1, 2}) {
      set_num_threads(t);
      EXPECT_LT(bf16_gemm_error(Trans::kYes, Trans::kNo, 200, 70, 1300, 0.5f, 1.0f, 3), 1e-5) << t;  // rows split
      EXPECT_LT(bf16_gemm_error(Trans::kYes, Trans::kNo, 40, 333, 1100, 1.0f, 0.0f, 0), 1e-5) << t;  // columns
      EXPECT_LT(bf16_gemm_error(Trans::kYes, Trans::kYes, 150, 64, 1030, 1.0f, 0.25f, 2), 1e-5) << t;
    }
    if (path != Bf16GemmPath::kOneDNN) continue;
    set_num_threads(1);
    const std::int64_t m = 96, n = 48, k = 1300, chunk = 512;
    const std::vector<bf16> a = random_bf16(k * m, 4), b = random_bf16(k * n, 5);
    const std::vector<float> c0 = testing::random_vec<float>(m * n, 6);
    std::vector<float> whole = c0, parts = c0;
    gemm_bf16(Trans::kYes, Trans::kNo, m, n, k, 1.0f, a.data(), m, b.data(), n, 0.75f, whole.data(), n);
    for (std::int64_t k0 = 0; k0 < k; k0 += chunk) {
      gemm_bf16(Trans::kYes, Trans::kNo, m, n, std::min(chunk, k - k0), 1.0f, a.data() + k0 * m, m, b.data() + k0 * n,
                n, k0 == 0 ? 0.75f : 1.0f, parts.data(), n);
    }
    for (std::size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(whole[i], parts[i]) << i;
  }
  set_bf16_gemm_path(Bf16GemmPath::kAuto);
  set_num_threads(threads);
}

// gemm_bf16_rounded is gemm_bf16 into fp32 followed by to_bf16, bit for bit (its contract: the saved
// v, gate and up projections of bf16 mode are what staging them at fp32 and rounding gave), on every
// path, transpose pair and padded stride, unsplit and split across threads, at tiny's shapes too
// (2,048 rows of 256 into 768). Elements of C outside the m x n block are left alone.
TEST(Bf16Gemm, RoundedOutputIsTheFp32ResultRoundedBitForBit) {
  const int threads = num_threads();
  for (int t : {1, 2}) {
    set_num_threads(t);
    for (Bf16GemmPath path : bf16_paths()) {
      set_bf16_gemm_path(path);
      SCOPED_TRACE(bf16_gemm_description() + ", threads " + std::to_string(t));
      for (Trans ta : {Trans::kNo, Trans::kYes}) {
        for (Trans tb : {Trans::kNo, Trans::kYes}) {
          struct Shape {
            std::int64_t m, n, k, pad;
          };
          for (const Shape& sh :
               {Shape{37, 29, 53, 0}, Shape{13, 71, 40, 7}, Shape{301, 130, 70, 5}, Shape{2048, 768, 256, 0}}) {
            if (sh.m == 2048 && (ta == Trans::kYes || tb == Trans::kNo)) continue;  // the forward linear only
            const std::int64_t a_cols = ta == Trans::kNo ? sh.k : sh.m, a_rows = ta == Trans::kNo ? sh.m : sh.k;
            const std::int64_t b_cols = tb == Trans::kNo ? sh.n : sh.k, b_rows = tb == Trans::kNo ? sh.k : sh.n;
            const std::int64_t lda = a_cols + sh.pad, ldb = b_cols + sh.pad, ldc = sh.n + sh.pad;
            const std::vector<bf16> a = random_bf16(a_rows * lda, 4), b = random_bf16(b_rows * ldb, 5);
            std::vector<float> c32(static_cast<std::size_t>(sh.m * ldc));
            gemm_bf16(ta, tb, sh.m, sh.n, sh.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c32.data(), ldc);
            std::vector<bf16> c16(static_cast<std::size_t>(sh.m * ldc), bf16{0x7fc1});  // NaN: untouched marker
            gemm_bf16_rounded(ta, tb, sh.m, sh.n, sh.k, a.data(), lda, b.data(), ldb, c16.data(), ldc);
            for (std::int64_t i = 0; i < sh.m; ++i) {
              for (std::int64_t j = 0; j < ldc; ++j) {
                const std::uint16_t want = j < sh.n ? float_to_bf16(c32[i * ldc + j]) : 0x7fc1;
                ASSERT_EQ(c16[i * ldc + j].bits, want)
                    << sh.m << "x" << sh.n << "x" << sh.k << " (" << i << ", " << j << ")";
              }
            }
          }
        }
      }
    }
  }
  set_bf16_gemm_path(Bf16GemmPath::kAuto);
  set_num_threads(threads);
}

TEST(Bf16Gemm, BetaZeroIgnoresGarbageAndTheAutoPathIsNamed) {
  for (Bf16GemmPath path : bf16_paths()) {
    set_bf16_gemm_path(path);
    std::vector<bf16> a(4), b(4);
    const float av[] = {1, 2, 3, 4}, bv[] = {1, 0, 0, 1};
    to_bf16(av, 4, a.data());
    to_bf16(bv, 4, b.data());
    std::vector<float> c(4, std::nanf(""));
    gemm_bf16(Trans::kNo, Trans::kNo, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
    EXPECT_EQ(c, std::vector<float>(av, av + 4));
  }
  set_bf16_gemm_path(Bf16GemmPath::kAuto);
  EXPECT_NE(bf16_gemm_path(), Bf16GemmPath::kAuto);
  EXPECT_EQ(bf16_gemm_path() == Bf16GemmPath::kOneDNN, have_onednn() && cpu_has_bf16());
  EXPECT_FALSE(bf16_gemm_description().empty());
}

// The bf16 loss pieces against the fp32 ones on the widened inputs: the logits are the same exact
// products summed in fp32, so the statistics agree to fp32 rounding; the gradients differ by rounding
// G = (softmax - onehot) x scale to bf16 before the two GEMMs, at most u = 2^-8 of G per element.
TEST(Bf16CrossEntropy, StatisticsAndGradientsMatchTheFp32KernelsOnWidenedInputs) {
  const std::int64_t n = 37, dim = 24, vocab = 300;
  const CrossEntropyTiles tiles{16, 128};  // several row and vocab tiles, ragged
  const std::vector<bf16> h = random_bf16(n * dim, 11), w = random_bf16(vocab * dim, 12);
  std::vector<float> hf(h.size()), wf(w.size());
  to_float(h.data(), n * dim, hf.data());
  to_float(w.data(), vocab * dim, wf.data());
  std::vector<std::int32_t> targets(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    targets[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 37) % vocab);
  targets[5] = kIgnoreIndex;
  std::vector<float> m16(n), s16(n), t16(n), m32(n), s32(n), t32(n);
  ce_shard_stats(h.data(), n, dim, w.data(), 0, vocab, targets.data(), m16.data(), s16.data(), t16.data(), tiles);
  ce_shard_stats<float>(hf.data(), n, dim, wf.data(), 0, vocab, targets.data(), m32.data(), s32.data(), t32.data(),
                        tiles);
  EXPECT_LT(testing::rel_error(m16, m32), 1e-5);
  EXPECT_LT(testing::rel_error(s16, s32), 1e-5);
  EXPECT_LT(testing::rel_error(t16, t32), 1e-5);
  std::vector<float> lse(n);
  ce_combine_stats<float>(n, 1, m32.data(), s32.data(), t32.data(), targets.data(), lse.data());
  std::vector<float> dh16(n * dim, 0.5f), dw16(vocab * dim, 0.25f), dh32 = dh16, dw32 = dw16;
  ce_shard_backward(h.data(), n, dim, w.data(), 0, vocab, targets.data(), lse.data(), 0.1f, dh16.data(), dw16.data(),
                    tiles);
  ce_shard_backward<float>(hf.data(), n, dim, wf.data(), 0, vocab, targets.data(), lse.data(), 0.1f, dh32.data(),
                           dw32.data(), tiles);
  // Relative to the size of the gradient itself (the 0.5 / 0.25 the buffers started from taken off).
  for (auto& x : dh16) x -= 0.5f;
  for (auto& x : dh32) x -= 0.5f;
  for (auto& x : dw16) x -= 0.25f;
  for (auto& x : dw32) x -= 0.25f;
  auto scaled_err = [](const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
      scale = std::max(scale, std::abs(double(b[i])));
    }
    return diff / scale;
  };
  EXPECT_LT(scaled_err(dh16, dh32), 0x1p-8);
  EXPECT_LT(scaled_err(dw16, dw32), 0x1p-8);
  EXPECT_GT(scaled_err(dh16, dh32), 0.0);  // G was rounded: not the fp32 numbers
}

// The one-sweep bf16 loss (what a rank holding the whole vocabulary runs) against the two sweeps
// (statistics, combine, recomputed gradients) the vocab-parallel path runs: with the vocabulary in one
// tile the sweep reuses each row tile's logits, and the GEMMs, exponentials, roundings and sums are
// the same, so lse, the loss and both gradients agree bit for bit; with several vocab tiles it falls
// back to the two sweeps themselves, which must then compute the one-tile results up to the order of
// their sums (lse and the loss to fp32 rounding, the gradients to a bf16 rounding of G).
TEST(Bf16CrossEntropy, OneSweepEqualsTheTwoSweepsBitForBit) {
  const std::int64_t n = 300, dim = 24, vocab = 320;
  const std::vector<bf16> h = random_bf16(n * dim, 13), w = random_bf16(vocab * dim, 14);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    targets[static_cast<std::size_t>(i)] = i % 7 == 2 ? kIgnoreIndex : static_cast<std::int32_t>((i * 41) % vocab);
  std::vector<float> lse_whole, dh_whole, dw_whole;  // the first tiling's (one vocab tile)
  double loss_whole = 0;
  for (const CrossEntropyTiles tiles :
       {CrossEntropyTiles{64, 512}, CrossEntropyTiles{256, 320}, CrossEntropyTiles{16, 128}}) {
    std::vector<float> lse1(n), lse2(n), stats(3 * n);
    std::vector<float> dh1(n * dim, 0.5f), dw1(vocab * dim, 0.25f), dh2 = dh1, dw2 = dw1;
    const CrossEntropyLoss one = cross_entropy_forward_backward(h.data(), n, dim, w.data(), vocab, targets.data(),
                                                                0.01f, lse1.data(), dh1.data(), dw1.data(), tiles);
    ce_shard_stats(h.data(), n, dim, w.data(), 0, vocab, targets.data(), stats.data(), stats.data() + n,
                   stats.data() + 2 * n, tiles);
    const CrossEntropyLoss two = ce_combine_stats<float>(n, 1, stats.data(), stats.data() + n, stats.data() + 2 * n,
                                                         targets.data(), lse2.data());
    ce_shard_backward(h.data(), n, dim, w.data(), 0, vocab, targets.data(), lse2.data(), 0.01f, dh2.data(), dw2.data(),
                      tiles);
    EXPECT_EQ(one.count, two.count);
    EXPECT_EQ(one.loss_sum, two.loss_sum) << "tiles " << tiles.rows << " x " << tiles.vocab;
    EXPECT_EQ(lse1, lse2);
    EXPECT_EQ(dh1, dh2);
    EXPECT_EQ(dw1, dw2);
    if (tiles.vocab >= vocab) {
      if (lse_whole.empty()) lse_whole = lse1, dh_whole = dh1, dw_whole = dw1, loss_whole = one.loss_sum;
      continue;
    }
    // Several vocab tiles: the same loss as the whole vocabulary in one tile, summed in another order.
    EXPECT_NEAR(one.loss_sum, loss_whole, 1e-5 * std::abs(loss_whole));
    for (std::int64_t i = 0; i < n; ++i) EXPECT_NEAR(lse1[i], lse_whole[i], 1e-5 * std::abs(lse_whole[i])) << i;
    // The gradients here reach 1.5e-2 (dh's start value subtracted) and the two tilings differ by an
    // fp32 ulp of the start values (6e-8 on this build); a G entry whose fp32 value crossed a bf16
    // rounding boundary would move a gradient by up to 2^-8 x 0.01 x |w| ~ 4e-5, so 2e-4 allows a few
    // such flips (another ISA's sum order) while a vocab tile left out or counted twice (an error of
    // the gradient's own size) fails. Every value is below 1, so rel_error is the absolute difference.
    EXPECT_LT(testing::rel_error(dh1, dh_whole), 2e-4);
    EXPECT_LT(testing::rel_error(dw1, dw_whole), 2e-4);
    EXPECT_GT(testing::rel_error(dh1, std::vector<float>(dh1.size(), 0.5f)), 1e-2);  // a gradient that size was added
  }
}

TEST(Bf16Embedding, RowsAreTheWidenedTableRowsAndZeroOffShard) {
  const std::vector<bf16> table = random_bf16(10 * 8, 21);
  const std::int32_t ids[] = {3, 12, 7, 3};  // 12 is off the shard [2, 12)
  std::vector<float> out(4 * 8, 9.0f);
  embedding_forward(ids, 4, table.data(), 2, 10, 8, out.data());
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(out[j], to_float(table[1 * 8 + j]));
    EXPECT_EQ(out[8 + j], 0.0f);
    EXPECT_EQ(out[16 + j], to_float(table[5 * 8 + j]));
  }
}

}  // namespace
}  // namespace herd::kernels
