// GEMMs on the GPU through cuBLASLt (kernels/cuda/kernels.h), row-major as kernels/gemm.h.
//
// cuBLASLt is column-major; a row-major (r, c) matrix with row stride ld is the column-major (c, r)
// matrix with leading dimension ld. So C = op(A) op(B) (row-major, m x n) is computed as the
// column-major C^T = op(B)^T op(A)^T: cuBLASLt's first operand is B with transpose flag tb, its second
// is A with ta, and its (m, n) is our (n, m). Compute type CUBLAS_COMPUTE_32F everywhere (fp32
// accumulation; no TF32 for fp32 inputs, so the fp32 path matches the CPU to summation order).
// Per thread: one cuBLASLt handle, a 32 MiB workspace from the caching allocator, and a cache of
// matmul descriptors, layouts and the heuristic's first algorithm per (shape, strides, types, beta = 0),
// so a training step after the first makes no heuristic queries.
#include <cublasLt.h>

#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda {
namespace {

#define HERD_CUBLAS(call)                                                                                            \
  do {                                                                                                               \
    const cublasStatus_t herd_st_ = (call);                                                                          \
    if (herd_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                                            \
      ::herd::kernels::cuda::throw_cuda_error_message(#call, cublasLtGetStatusString(herd_st_), __FILE__, __LINE__); \
    }                                                                                                                \
  } while (0)

constexpr std::size_t kWorkspaceBytes = 32u << 20;

using Key = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                       int, int, bool>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool have_algo = false;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct ThreadBlas {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans;
  ThreadBlas() {
    HERD_CUBLAS(cublasLtCreate(&handle));
    workspace = device_alloc(kWorkspaceBytes);
  }
  ~ThreadBlas() {
    plans.clear();
    if (handle) cublasLtDestroy(handle);
    // The workspace goes back to the caching allocator only if the thread exits before the process.
    try {
      device_free(workspace);
    } catch (...) {
    }
  }
};

ThreadBlas& blas() {
  thread_local ThreadBlas t;
  return t;
}

// The column-major layout of row-major operand X (stored rows x cols with stride ld).
cublasLtMatrixLayout_t layout(cudaDataType_t type, std::int64_t rows_stored, std::int64_t cols_stored,
                              std::int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  HERD_CUBLAS(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(cols_stored),
                                         static_cast<std::uint64_t>(rows_stored), ld));
  return l;
}

void matmul(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const void* a,
            cudaDataType_t ab_type, std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c,
            cudaDataType_t c_type, std::int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta C: cuBLASLt rejects k = 0
    HERD_CHECK_CUDA_ARG(beta == 0.0f || beta == 1.0f, "gemm with k = 0 supports beta 0 or 1 only");
    if (beta == 0.0f) {
      const std::size_t es = c_type == CUDA_R_32F ? 4 : 2;
      HERD_CUDA(cudaMemset2DAsync(c, static_cast<std::size_t>(ldc) * es, 0, static_cast<std::size_t>(n) * es,
                                  static_cast<std::size_t>(m), stream()));
    }
    return;
  }
  ThreadBlas& t = blas();
  const bool zero_beta = beta == 0.0f;
  const Key key{ta == Trans::kYes,         tb == Trans::kYes,        m,        n, k, lda, ldb, ldc,
                static_cast<int>(ab_type), static_cast<int>(c_type), zero_beta};
  auto& slot = t.plans[key];
  if (!slot) {
    auto p = std::make_unique<Plan>();
    HERD_CUBLAS(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // cuBLASLt operand 1 = B (flag tb), operand 2 = A (flag ta).
    const cublasOperation_t op1 = tb == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op2 = ta == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
    HERD_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof(op1)));
    HERD_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof(op2)));
    // Stored shapes (row-major): op(B) is (k, n): B stored (k, n) untransposed or (n, k) transposed.
    p->b = tb == Trans::kNo ? layout(ab_type, k, n, ldb) : layout(ab_type, n, k, ldb);
    p->a = ta == Trans::kNo ? layout(ab_type, m, k, lda) : layout(ab_type, k, m, lda);
    p->c = layout(c_type, m, n, ldc);
    cublasLtMatmulPreference_t pref = nullptr;
    HERD_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t ws = kWorkspaceBytes;
    HERD_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(t.handle, p->desc, p->b, p->a, p->c, p->c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
      p->algo = result.algo;
      p->have_algo = true;
    }
    slot = std::move(p);
  }
  const Plan& p = *slot;
  HERD_CUBLAS(cublasLtMatmul(t.handle, p.desc, &alpha, b, p.b, a, p.a, &beta, c, p.c, c, p.c,
                             p.have_algo ? &p.algo : nullptr, t.workspace, kWorkspaceBytes, stream()));
}

}  // namespace

void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  matmul(ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, b, ldb, beta, c, CUDA_R_32F, ldc);
}

void gemm_bf16(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
               std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  matmul(ta, tb, m, n, k, alpha, a, CUDA_R_16BF, lda, b, ldb, beta, c, CUDA_R_32F, ldc);
}

void gemm_bf16_out(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                   std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc) {
  matmul(ta, tb, m, n, k, alpha, a, CUDA_R_16BF, lda, b, ldb, 0.0f, c, CUDA_R_16BF, ldc);
}

}  // namespace herd::kernels::cuda
