// gemm (cblas) against the naive reference: every transpose pair, alpha/beta, odd sizes, padded
// leading dimensions, GEMMs split across threads; float to 1e-5 and double to 1e-12.
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

// Every float policy (OpenBLAS, oneDNN when built with it) must agree with the reference.
std::vector<GemmPolicy> policies() {
  std::vector<GemmPolicy> p = {GemmPolicy::kOpenBLAS, GemmPolicy::kAuto};
  if (have_onednn()) p.push_back(GemmPolicy::kOneDNN);
  return p;
}

TEST(Gemm, AllTransposesMatchReference) {
  const GemmPolicy before = gemm_policy();
  for (GemmPolicy policy : policies()) {
    set_gemm_policy(policy);
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        EXPECT_LT(gemm_error<float>(ta, tb, 37, 29, 53, 1.0f, 0.0f, 0), 1e-5);
        EXPECT_LT(gemm_error<float>(ta, tb, 64, 17, 5, 0.5f, 1.0f, 3), 1e-5);
        EXPECT_LT(gemm_error<double>(ta, tb, 37, 29, 53, 1.0, 0.0, 0), 1e-12);
        EXPECT_LT(gemm_error<double>(ta, tb, 13, 71, 40, -2.0, 0.25, 7), 1e-12);
      }
    }
  }
  set_gemm_policy(before);
}

// Large enough for gemm to split C into blocks across 2 threads (along m when m >= n, else along n,
// with a ragged last block), every transpose pair and policy, padded strides and beta = 1.
TEST(Gemm, SplitAcrossThreadsMatchesReference) {
  const GemmPolicy before = gemm_policy();
  const int threads = num_threads();
  set_num_threads(2);
  for (GemmPolicy policy : policies()) {
    set_gemm_policy(policy);
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        EXPECT_LT(gemm_error<float>(ta, tb, 301, 130, 70, 1.0f, 0.0f, 0), 1e-5);  // rows split
        EXPECT_LT(gemm_error<float>(ta, tb, 40, 333, 160, 0.5f, 1.0f, 5), 1e-5);  // columns split
        EXPECT_LT(gemm_error<double>(ta, tb, 140, 261, 64, -2.0, 0.25, 3), 1e-12);
      }
    }
  }
  set_gemm_policy(before);
  set_num_threads(threads);
}

TEST(Gemm, BetaZeroIgnoresGarbageInC) {
  const GemmPolicy before = gemm_policy();
  for (GemmPolicy policy : policies()) {
    set_gemm_policy(policy);
    std::vector<float> a = {1, 2, 3, 4}, b = {1, 0, 0, 1};
    std::vector<float> c(4, std::nanf(""));
    gemm<float>(Trans::kNo, Trans::kNo, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
    EXPECT_EQ(c, a);
  }
  set_gemm_policy(before);
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
