#include "herd/kernels/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "herd/kernels/cuda/kernels.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

using testing::all_close;
using testing::download;
using testing::random_vector;
using testing::to_bf16_host;
using testing::upload;

struct Case {
  Trans ta, tb;
  std::int64_t m, n, k, pad;  // pad: extra elements per row beyond the dense stride
  float alpha, beta;
};

// Test names carry the case (the generator below); gtest need not print its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.ta == Trans::kYes ? "T" : "N") << (c.tb == Trans::kYes ? "T" : "N") << " " << c.m << "x" << c.n << "x"
      << c.k;
}

class CudaGemm : public ::testing::TestWithParam<Case> {};

// Stored rows and columns of op(X) = (r, c) given the transpose flag.
std::int64_t stored_rows(Trans t, std::int64_t r, std::int64_t c) { return t == Trans::kNo ? r : c; }
std::int64_t stored_cols(Trans t, std::int64_t r, std::int64_t c) { return t == Trans::kNo ? c : r; }

TEST_P(CudaGemm, Fp32MatchesReference) {
  HERD_REQUIRE_GPU();
  const Case c = GetParam();
  const std::int64_t lda = stored_cols(c.ta, c.m, c.k) + c.pad, ldb = stored_cols(c.tb, c.k, c.n) + c.pad,
                     ldc = c.n + c.pad;
  auto a = random_vector(stored_rows(c.ta, c.m, c.k) * lda, 1);
  auto b = random_vector(stored_rows(c.tb, c.k, c.n) * ldb, 2);
  auto c0 = random_vector(c.m * ldc, 3);
  if (c.beta == 0.0f) c0.assign(c0.size(), std::numeric_limits<float>::quiet_NaN());  // beta = 0 never reads C
  std::vector<float> want = c0;
  if (c.beta == 0.0f) want.assign(want.size(), 0.0f);
  kernels::gemm_reference<float>(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, want.data(),
                                 ldc);
  auto da = upload(a), db = upload(b), dc = upload(c0);
  cuda::gemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, da.data(), lda, db.data(), ldb, c.beta, dc.data(), ldc);
  std::vector<float> got = download(dc);
  // Only the m x n block is defined after beta = 0 (the padding keeps its NaN).
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = c.n; j < ldc; ++j) got[i * ldc + j] = want[i * ldc + j];
  }
  // fp32 sums of k products of values in [-1, 1]: the two orders differ by about k * 2^-24 * sqrt(k).
  EXPECT_TRUE(all_close(got, want, 1e-5 * static_cast<double>(c.k), 1e-5));
}

TEST_P(CudaGemm, Bf16MatchesReference) {
  HERD_REQUIRE_GPU();
  const Case c = GetParam();
  const std::int64_t lda = stored_cols(c.ta, c.m, c.k) + c.pad, ldb = stored_cols(c.tb, c.k, c.n) + c.pad,
                     ldc = c.n + c.pad;
  const auto a = to_bf16_host(random_vector(stored_rows(c.ta, c.m, c.k) * lda, 4));
  const auto b = to_bf16_host(random_vector(stored_rows(c.tb, c.k, c.n) * ldb, 5));
  auto c0 = random_vector(c.m * ldc, 6);
  std::vector<float> want = c0;
  if (c.beta == 0.0f) {
    c0.assign(c0.size(), std::numeric_limits<float>::quiet_NaN());
    want.assign(want.size(), 0.0f);
  }
  kernels::gemm_bf16_reference(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, want.data(),
                               ldc);
  DeviceBuffer<bf16> da = upload(a), db = upload(b);
  DeviceBuffer<float> dc = upload(c0);
  cuda::gemm_bf16(c.ta, c.tb, c.m, c.n, c.k, c.alpha, da.data(), lda, db.data(), ldb, c.beta, dc.data(), ldc);
  std::vector<float> got = download(dc);
  for (std::int64_t i = 0; i < c.m; ++i) {
    for (std::int64_t j = c.n; j < ldc; ++j) got[i * ldc + j] = want[i * ldc + j];
  }
  // Products of bf16 values are exact in fp32; only the fp32 summation order differs from the reference.
  EXPECT_TRUE(all_close(got, want, 1e-5 * static_cast<double>(c.k), 1e-5));

  if (c.beta == 0.0f) {  // the bf16-output variant: the same sums, rounded once to bf16
    DeviceBuffer<bf16> d16(c.m * ldc);
    cuda::gemm_bf16_out(c.ta, c.tb, c.m, c.n, c.k, c.alpha, da.data(), lda, db.data(), ldb, d16.data(), ldc);
    const std::vector<bf16> got16 = download(d16);
    for (std::int64_t i = 0; i < c.m; ++i) {
      for (std::int64_t j = 0; j < c.n; ++j) {
        const float w = want[i * ldc + j], g = bf16_to_float(got16[i * ldc + j].bits);
        // One bf16 rounding (relative 2^-8) of a value that may itself sit on a rounding boundary.
        EXPECT_NEAR(g, w, std::fabs(w) * (1.0 / 128) + 1e-5 * c.k) << i << "," << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemm,
                         ::testing::Values(Case{Trans::kNo, Trans::kNo, 37, 53, 61, 0, 1.0f, 0.0f},
                                           Case{Trans::kNo, Trans::kYes, 64, 96, 128, 0, 1.0f, 1.0f},
                                           Case{Trans::kYes, Trans::kNo, 96, 64, 40, 3, 0.5f, 1.0f},
                                           Case{Trans::kYes, Trans::kYes, 17, 31, 129, 5, -1.0f, 0.0f},
                                           Case{Trans::kNo, Trans::kYes, 256, 512, 1024, 0, 1.0f, 0.0f},
                                           Case{Trans::kNo, Trans::kNo, 1, 300, 7, 1, 2.0f, 1.0f}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           const Case& c = i.param;
                           return std::string(c.ta == Trans::kYes ? "T" : "N") + (c.tb == Trans::kYes ? "T" : "N") +
                                  "_" + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
                                  (c.pad ? "_strided" : "") + (c.beta == 0.0f ? "_beta0" : "_beta1");
                         });

// k = 0: C = beta C (beta 0 clears the m x n block).
TEST(CudaGemmEdge, EmptyInnerDimension) {
  HERD_REQUIRE_GPU();
  auto c0 = random_vector(4 * 6, 9);
  auto dc = upload(c0);
  gemm(Trans::kNo, Trans::kNo, 4, 5, 0, 1.0f, nullptr, 1, nullptr, 5, 1.0f, dc.data(), 6);
  EXPECT_EQ(download(dc), c0);
  gemm(Trans::kNo, Trans::kNo, 4, 5, 0, 1.0f, nullptr, 1, nullptr, 5, 0.0f, dc.data(), 6);
  const auto got = download(dc);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 6; ++j) EXPECT_EQ(got[i * 6 + j], j < 5 ? 0.0f : c0[i * 6 + j]);
  }
}

}  // namespace
}  // namespace herd::kernels::cuda
