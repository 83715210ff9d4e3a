// gemm through cblas (OpenBLAS), the naive reference, and the shared thread-count setting.
//
// Threading: herd splits a large GEMM itself, across the OpenMP team its other kernels use, into
// independent column or row blocks of C, each a single-threaded library call; the libraries run one
// thread each. With two thread pools (OpenBLAS's pthreads and OpenMP's) the OpenMP workers keep
// spinning for milliseconds after each of herd's parallel regions and take the cores from the BLAS
// threads that start next: on 2 cores, 19% of the step's CPU time went to that spinning (perf, tiny
// preset). One pool removes it, and lets each block use the faster single-threaded library
// (oneDNN for non-transposed A, docs/blas.md). Splitting along m or n leaves every element's
// k-summation to one call, as in an unsplit call.
#include "herd/kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#ifdef HERD_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

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

std::atomic<GemmPolicy> g_policy{GemmPolicy::kAuto};
std::atomic<int> g_threads{0};  // herd's thread count for GEMM splitting; 0 until first set or use

// The first use fixes OpenBLAS at one thread (herd splits GEMMs itself) and takes the OpenMP default
// as herd's thread count unless set_num_threads came first.
void init_threads() {
  static std::once_flag once;
  std::call_once(once, [] {
    openblas_set_num_threads(1);
    int expected = 0;
    g_threads.compare_exchange_strong(expected, omp_get_max_threads());
  });
}

// single: the call is a block of a split GEMM (or runs inside some other parallel region), so one thread;
// otherwise one thread is when OpenMP has one. oneDNN is the faster single-threaded sgemm for non-transposed A.
bool use_onednn(Trans ta, bool single) {
#ifdef HERD_HAVE_DNNL
  switch (g_policy.load(std::memory_order_relaxed)) {
    case GemmPolicy::kOpenBLAS: return false;
    case GemmPolicy::kOneDNN: return true;
    case GemmPolicy::kAuto: return ta == Trans::kNo && (single || omp_get_max_threads() == 1);
  }
#endif
  (void)ta;
  (void)single;
  return false;
}

void library_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                  std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc,
                  bool single) {
#ifdef HERD_HAVE_DNNL
  if (use_onednn(ta, single)) {
    const dnnl_status_t st = dnnl_sgemm(ta == Trans::kYes ? 'T' : 'N', tb == Trans::kYes ? 'T' : 'N', m, n, k, alpha, a,
                                        lda, b, ldb, beta, c, ldc);
    HERD_CHECK(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st));
    return;
  }
#endif
  (void)single;
  cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void library_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
                  std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc,
                  bool /*single*/) {
  cblas_dgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kSplitMinMacs = 2.0e6;
// Block edges are multiples of this, so every block but the last is whole vectors and cache lines.
constexpr std::int64_t kSplitAlign = 64;

// C (m, n) in `parts` blocks along n when n is the larger side (row-major C: column blocks), else
// along m; each block is an ordinary GEMM on offset pointers.
template <typename T>
void split_gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc, int parts) {
  const bool along_n = n >= m;
  const std::int64_t len = along_n ? n : m;
  const std::int64_t block = (len + parts - 1) / parts;
  const std::int64_t step = std::max(kSplitAlign, (block + kSplitAlign - 1) / kSplitAlign * kSplitAlign);
  const std::int64_t blocks = (len + step - 1) / step;
#pragma omp parallel for schedule(static, 1) num_threads(parts)
  for (std::int64_t i = 0; i < blocks; ++i) {
    const std::int64_t b0 = i * step, bn = std::min(step, len - b0);
    if (along_n) {
      const T* bb = tb == Trans::kNo ? b + b0 : b + b0 * ldb;
      library_gemm(ta, tb, m, bn, k, alpha, a, lda, bb, ldb, beta, c + b0, ldc, true);
    } else {
      const T* ab = ta == Trans::kNo ? a + b0 * lda : a + b0;
      library_gemm(ta, tb, bn, n, k, alpha, ab, lda, b, ldb, beta, c + b0 * ldc, ldc, true);
    }
  }
}

template <typename T>
void gemm_impl(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
               std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  check_dims(ta, tb, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  init_threads();
  const int threads = g_threads.load(std::memory_order_relaxed);
  const bool inside = omp_in_parallel();
  const bool big = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) >= kSplitMinMacs;
  if (threads > 1 && !inside && big && std::max(m, n) >= 2 * kSplitAlign) {
    split_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads);
    return;
  }
  library_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, inside);
}

}  // namespace

void set_gemm_policy(GemmPolicy p) { g_policy.store(p); }
GemmPolicy gemm_policy() { return g_policy.load(); }
bool have_onednn() {
#ifdef HERD_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

template <>
void gemm<float>(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                 std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  gemm_impl<float>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <>
void gemm<double>(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
                  std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  gemm_impl<double>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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
  g_threads.store(n);
  init_threads();
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

const char* blas_name() { return openblas_get_config(); }

}  // namespace herd::kernels
