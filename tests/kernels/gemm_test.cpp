// gemm (cblas) against the naive reference: every transpose pair, alpha/beta, odd sizes, padded
// leading dimensions; float to 1e-5 and double to 1e-12.
#include "herd/kernels/gemm.h"

#include <gtest/gtest.h>

#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

using testing::random_vec;
using testing::rel_error;

template <typename T>
double gemm_error(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, T beta,
                  std::int64_t pad) {
  const std::int64_t a_rows = ta == Trans::kNo ? m : k, a_cols = ta == Trans::kNo ? k : m;
  const std::int64_t b_rows = tb == Trans::kNo ? k : n, b_cols = tb == Trans::kNo ? n : k;
  const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  auto a = random_vec<T>(a_rows * lda, 1);
  auto b = random_vec<T>(b_rows * ldb, 2);
  auto c = random_vec<T>(m * ldc, 3);
  auto c_ref = c;
  gemm<T>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  gemm_reference<T>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c_ref.data(), ldc);
  return rel_error(c, c_ref);
}

TEST(Gemm, AllTransposesMatchReference) {
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      EXPECT_LT(gemm_error<float>(ta, tb, 37, 29, 53, 1.0f, 0.0f, 0), 1e-5);
      EXPECT_LT(gemm_error<float>(ta, tb, 64, 17, 5, 0.5f, 1.0f, 3), 1e-5);
      EXPECT_LT(gemm_error<double>(ta, tb, 37, 29, 53, 1.0, 0.0, 0), 1e-12);
      EXPECT_LT(gemm_error<double>(ta, tb, 13, 71, 40, -2.0, 0.25, 7), 1e-12);
    }
  }
}

TEST(Gemm, BetaZeroIgnoresGarbageInC) {
  std::vector<float> a = {1, 2, 3, 4}, b = {1, 0, 0, 1};
  std::vector<float> c(4, std::nanf(""));
  gemm<float>(Trans::kNo, Trans::kNo, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, a);
}

TEST(Gemm, ThreadCountIsSettable) {
  const int before = num_threads();
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  EXPECT_LT(gemm_error<float>(Trans::kNo, Trans::kYes, 65, 33, 47, 1.0f, 0.0f, 0), 1e-5);
  set_num_threads(before);
  EXPECT_NE(std::string(blas_name()), "");
}

}  // namespace
}  // namespace herd::kernels
