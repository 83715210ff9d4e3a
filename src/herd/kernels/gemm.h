// Matrix multiply through the BLAS, and the thread count the runtime's CPU kernels use.
//
// All matrices are row-major. gemm computes C = alpha * op(A) * op(B) + beta * C with op(A) (m, k),
// op(B) (k, n), C (m, n); lda/ldb/ldc are the row strides of A, B, C as stored. beta = 1 accumulates
// (the contract weight gradients rely on), beta = 0 overwrites (C may then hold garbage, even NaN).
// The CPU backend calls cblas (OpenBLAS; docs/blas.md says why) for float and double; gemm_reference
// is the naive triple loop kept as the spec.
#pragma once

#include <cstdint>

namespace herd::kernels {

enum class Trans { kNo, kYes };

template <typename T>
void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a, std::int64_t lda,
          const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

template <typename T>
void gemm_reference(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                    std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

// Threads for the BLAS and for herd's own OpenMP kernels, set together: when several ranks share the
// cores, give each rank one thread (ENVIRONMENT.md). Defaults to the OpenMP default (all cores, or
// OMP_NUM_THREADS).
void set_num_threads(int n);
int num_threads();
const char* blas_name();  // e.g. "OpenBLAS 0.3.21 ... SapphireRapids MAX_THREADS=64"

}  // namespace herd::kernels
