// Matrix multiply through the BLAS, and the thread count the runtime's CPU kernels use.
//
// All matrices are row-major. gemm computes C = alpha * op(A) * op(B) + beta * C with op(A) (m, k),
// op(B) (k, n), C (m, n); lda/ldb/ldc are the row strides of A, B, C as stored. beta = 1 accumulates
// (the contract weight gradients rely on), beta = 0 overwrites (C may then hold garbage, even NaN).
// The CPU backend calls cblas (OpenBLAS) for double and, by default, for float; docs/blas.md has the
// measurements behind the policy below. gemm_reference is the naive triple loop kept as the spec.
#pragma once

#include <cstdint>
#include <string>

#include "herd/core/bf16.h"

namespace herd::kernels {

enum class Trans { kNo, kYes };

template <typename T>
void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a, std::int64_t lda,
          const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

template <typename T>
void gemm_reference(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                    std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

// C (fp32) = alpha op(A) op(B) + beta C with A and B in bf16 (`train.precision = bf16`): every
// product of two bf16 values is exact in fp32 and the k-sums accumulate in fp32, so the result is the
// fp32 GEMM of the widened inputs up to summation order. Same layout and beta contract as gemm.
// Served by oneDNN's matmul primitive (bf16 inputs, fp32 destination, beta as a sum post-op), which
// uses AVX512-BF16 (vdpbf16ps) or AMX where the CPU has them, split over herd's threads like gemm;
// otherwise, or with kConverted, the inputs are widened to fp32 and go through gemm<float>: the same
// numbers at the fp32 rate. docs/precision.md has the measurements.
void gemm_bf16(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
               std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
// C (bf16) = op(A) op(B), A and B in bf16: gemm_bf16's fp32 sums rounded to bf16 (nearest even) as
// they are written, which is gemm_bf16 into fp32 then to_bf16, bit for bit, without the fp32 copy
// (oneDNN's matmul with a bf16 destination; the converted path rounds a thread-local fp32 result). For
// a saved activation that is a bf16 GEMM output (bf16 mode's v, gate and up projections).
void gemm_bf16_rounded(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a,
                       std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc);
// The spec: the triple loop over widened values, summed in double.
void gemm_bf16_reference(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                         std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// How gemm_bf16 computes. kAuto: oneDNN's bf16 matmul when the build has oneDNN and the CPU has
// AVX512-BF16 or AMX-BF16 instructions; else kConverted, said once on the log (warning) at first use.
enum class Bf16GemmPath { kAuto, kOneDNN, kConverted };
void set_bf16_gemm_path(Bf16GemmPath p);
// The path kAuto resolves to on this machine and build (never kAuto).
Bf16GemmPath bf16_gemm_path();
// "oneDNN bf16 matmul (avx512_bf16)" or "converted to fp32 (no bf16 instructions on this CPU)", for logs
// and benchmark records.
std::string bf16_gemm_description();
// Whether this CPU executes bf16 dot products natively (AVX512-BF16 or AMX-BF16).
bool cpu_has_bf16();

// Which library serves float gemm. On the reference CPU (Sapphire Rapids) oneDNN's sgemm is ~15% faster
// than OpenBLAS on one thread when A is not transposed (forward and dX GEMMs) and ~20% slower when it is
// (weight gradients), and OpenMP libraries degrade when ranks oversubscribe the cores. kAuto: oneDNN for
// non-transposed A on one thread, OpenBLAS otherwise. Without oneDNN at build time every policy is
// OpenBLAS.
enum class GemmPolicy { kOpenBLAS, kOneDNN, kAuto };
void set_gemm_policy(GemmPolicy p);
GemmPolicy gemm_policy();
bool have_onednn();

// Threads for the BLAS and for herd's own OpenMP kernels, set together: when several ranks share the
// cores, give each rank one thread (oversubscribed BLAS threads collapse). Defaults to the OpenMP default (all cores,
// or OMP_NUM_THREADS).
void set_num_threads(int n);
int num_threads();
const char* blas_name();  // e.g. "OpenBLAS 0.3.21 ... SapphireRapids MAX_THREADS=64"

}  // namespace herd::kernels
