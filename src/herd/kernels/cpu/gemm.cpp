// gemm through cblas (OpenBLAS), the naive reference, and the shared thread-count setting.
#include "herd/kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

#include "herd/core/check.h"

namespace herd::kernels {

namespace {

CBLAS_TRANSPOSE cblas_trans(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

void check_dims(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t lda, std::int64_t ldb,
                std::int64_t ldc) {
  HERD_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm sizes m=", m, " n=", n, " k=", k);
  // Row-major: A stored (m, k) or, transposed, (k, m); its row stride covers a stored row.
  HERD_CHECK(lda >= (ta == Trans::kNo ? k : m) && lda >= 1, "gemm lda=", lda);
  HERD_CHECK(ldb >= (tb == Trans::kNo ? n : k) && ldb >= 1, "gemm ldb=", ldb);
  HERD_CHECK(ldc >= n && ldc >= 1, "gemm ldc=", ldc);
  HERD_CHECK(m < (std::int64_t{1} << 31) && n < (std::int64_t{1} << 31) && k < (std::int64_t{1} << 31),
             "gemm dimension beyond the 32-bit BLAS interface");
}

}  // namespace

template <>
void gemm<float>(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                 std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  check_dims(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

template <>
void gemm<double>(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
                  std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  check_dims(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  cblas_dgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

template <typename T>
void gemm_reference(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                    std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  check_dims(ta, tb, m, n, k, lda, ldb, ldc);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const T x = ta == Trans::kNo ? a[i * lda + p] : a[p * lda + i];
        const T y = tb == Trans::kNo ? b[p * ldb + j] : b[j * ldb + p];
        s += static_cast<double>(x) * static_cast<double>(y);
      }
      // beta == 0 ignores C, as BLAS does (C may be uninitialised).
      const double prev = beta == T(0) ? 0.0 : static_cast<double>(beta) * c[i * ldc + j];
      c[i * ldc + j] = static_cast<T>(static_cast<double>(alpha) * s + prev);
    }
  }
}

template void gemm_reference<float>(Trans, Trans, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                                    std::int64_t, const float*, std::int64_t, float, float*, std::int64_t);
template void gemm_reference<double>(Trans, Trans, std::int64_t, std::int64_t, std::int64_t, double, const double*,
                                     std::int64_t, const double*, std::int64_t, double, double*, std::int64_t);

void set_num_threads(int n) {
  HERD_CHECK(n >= 1, "thread count ", n);
  openblas_set_num_threads(n);
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

const char* blas_name() { return openblas_get_config(); }

}  // namespace herd::kernels
