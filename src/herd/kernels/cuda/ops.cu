// The CUDA op interface (kernels/ops.h): each method calls the kernel of kernels/cuda/kernels.h with the
// same contract on the calling thread's compute stream, or composes two or three of them where the
// interface's contract is the CPU's and kernels/cuda has its parts (the bf16 RMSNorm and RoPE variants,
// the one-shard cross-entropy, AdamW's clip factor and bf16 copy). The copies are the runtime's and
// cudaMemcpy2DAsync; the element-wise sums and the strided bf16 conversions are the small kernels below.
// Registered with kernels/ops.h when the binary loads, as backend.cpp registers the DeviceBackend.
//
// fp32 and bf16 only: the fp64 methods are a check failure (fp64 trains on the CPU; the configuration
// refuses train.device = cuda before a model is built).
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

#include "herd/core/check.h"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"
#include "herd/kernels/ops.h"

namespace herd::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void add_kernel(const T* x, std::int64_t n, T* y) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

// out (rows, width) at stride ldo = x (rows, width) at stride ldx, widened (exact) or rounded to bf16.
template <typename From, typename To>
__global__ void convert_rows_kernel(const From* x, std::int64_t ldx, std::int64_t rows, std::int64_t width, To* out,
                                    std::int64_t ldo) {
  const std::int64_t total = rows * width;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / width, c = i % width;
    if constexpr (std::is_same_v<To, float>) {
      out[r * ldo + c] = widen(x[r * ldx + c]);
    } else {
      out[r * ldo + c] = narrow_bf16(x[r * ldx + c]);
    }
  }
}

void widen_rows(const bf16* x, std::int64_t ldx, std::int64_t rows, std::int64_t width, float* out, std::int64_t ldo) {
  if (rows <= 0 || width <= 0) return;
  convert_rows_kernel<__nv_bfloat16, float>
      <<<grid_for(rows * width, kThreads), kThreads, 0, stream()>>>(dev(x), ldx, rows, width, out, ldo);
  HERD_CUDA_LAUNCHED("widen_rows");
}

void round_rows(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t width, bf16* out, std::int64_t ldo) {
  if (rows <= 0 || width <= 0) return;
  convert_rows_kernel<float, __nv_bfloat16>
      <<<grid_for(rows * width, kThreads), kThreads, 0, stream()>>>(x, ldx, rows, width, dev(out), ldo);
  HERD_CUDA_LAUNCHED("round_rows");
}

[[noreturn]] void no_fp64(const char* op) {
  HERD_CHECK(false, "kernels::Ops (cuda): ", op, " in fp64; fp64 runs on the CPU (train.device = cpu)");
  __builtin_unreachable();
}

// The device copy of each host RoPE table the interface is given, made at its first use.
class RopeTables {
 public:
  const DeviceRopeTable& get(const RopeTable<float>& host) {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<DeviceRopeTable>& t = tables_[&host];
    const RopeConfig& a = host.config();
    const bool same = t && t->max_pos() == host.max_pos() && t->config().head_dim == a.head_dim &&
                      t->config().theta == a.theta && t->config().scaling_factor == a.scaling_factor &&
                      t->config().layout == a.layout;
    if (!same) {
      if (t) synchronize();  // a table at a reused address: the old copy's readers finish first
      t = std::make_unique<DeviceRopeTable>(host);
    }
    return *t;
  }

 private:
  std::mutex mu_;
  std::map<const void*, std::unique_ptr<DeviceRopeTable>> tables_;
};

class CudaOps final : public Ops {
 public:
  Device device() const override { return Device::kCuda; }

  void* allocate(std::size_t bytes) const override { return device_alloc(bytes == 0 ? 1 : bytes); }
  void deallocate(void* p) const override {
    if (p != nullptr) device_free(p);
  }
  void copy_from_host(const void* host, void* dst, std::size_t bytes) const override {
    if (bytes > 0) copy_to_device(dst, host, bytes);
  }
  void copy_to_host(const void* src, void* host, std::size_t bytes) const override {
    if (bytes > 0) cuda::copy_to_host(host, src, bytes);
  }
  void synchronize() const override { cuda::synchronize(); }
  bool holds(const void* p) const override {
    cudaPointerAttributes a{};
    if (p == nullptr || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // a plain host pointer is not an error worth keeping
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }
  void* queue() const override { return compute_stream(); }
  double peak_allocated_bytes() const override { return static_cast<double>(allocator_stats().peak_allocated); }

  void copy(const void* src, void* dst, std::size_t bytes) const override {
    if (bytes > 0) copy_device(dst, src, bytes);
  }
  void copy_rows(const void* src, std::size_t src_pitch, void* dst, std::size_t dst_pitch, std::size_t row_bytes,
                 std::int64_t rows) const override {
    if (rows <= 0 || row_bytes == 0) return;
    HERD_CUDA(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, static_cast<std::size_t>(rows),
                                cudaMemcpyDeviceToDevice, stream()));
  }
  void zero(void* dst, std::size_t bytes) const override {
    if (bytes > 0) fill_zero(dst, bytes);
  }
  void add(const float* x, std::int64_t n, float* y) const override { add_into(x, n, y); }
  void add(const double*, std::int64_t, double*) const override { no_fp64("add"); }

  void to_bf16(const float* x, std::int64_t n, bf16* out) const override { cuda::to_bf16(x, n, out); }
  void to_float(const bf16* x, std::int64_t n, float* out) const override { cuda::to_float(x, n, out); }
  void round_to_bf16(float* x, std::int64_t n, bf16* out) const override { cuda::round_to_bf16(x, n, out); }

  void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
            std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) const override {
    cuda::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm(Trans, Trans, std::int64_t, std::int64_t, std::int64_t, double, const double*, std::int64_t, const double*,
            std::int64_t, double, double*, std::int64_t) const override {
    no_fp64("gemm");
  }
  void gemm_bf16(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                 std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c,
                 std::int64_t ldc) const override {
    cuda::gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16_rounded(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a,
                         std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc) const override {
    cuda::gemm_bf16_out(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, c, ldc);
  }

  void attention_forward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k, const float* v,
                         float* out, float* lse) const override {
    cuda::attention_forward(d, m, q, k, v, out, lse);
  }
  void attention_forward(const AttentionDims&, const AttentionMask&, const double*, const double*, const double*,
                         double*, double*) const override {
    no_fp64("attention_forward");
  }
  // The interface's bf16 forward writes fp32 out (the caller rounds it, kernels/attention.h); the CUDA
  // kernel writes bf16, which is that rounding: widened into out, the caller's rounding keeps its bits.
  void attention_forward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                         float* out, float* lse) const override {
    const std::int64_t width = d.q_heads * d.head_dim, ld = d.ld_o != 0 ? d.ld_o : width;
    const std::int64_t rows = d.batch * d.tq;
    DeviceBuffer<bf16> out16(rows * ld);
    cuda::attention_forward(d, m, q, k, v, out16.data(), lse);
    widen_rows(out16.data(), ld, rows, width, out, ld);
  }
  void attention_backward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const float* dout, float* dq, float* dk,
                          float* dv) const override {
    cuda::attention_backward(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  }
  void attention_backward(const AttentionDims&, const AttentionMask&, const double*, const double*, const double*,
                          const double*, const double*, const double*, double*, double*, double*) const override {
    no_fp64("attention_backward");
  }
  void attention_backward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                          const bf16* out, const float* lse, const float* dout, float* dq, float* dk,
                          float* dv) const override {
    cuda::attention_backward(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  }

  void rmsnorm_forward(const float* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                       float* y, std::int64_t ldy, float* rstd) const override {
    cuda::rmsnorm_forward(x, ldx, w, n, dim, eps, y, ldy, rstd);
  }
  void rmsnorm_forward(const double*, std::int64_t, const double*, std::int64_t, std::int64_t, double, double*,
                       std::int64_t, double*) const override {
    no_fp64("rmsnorm_forward");
  }
  // kernels/rmsnorm.h: the fp32 kernel on the widened x, y rounded after.
  void rmsnorm_forward(const bf16* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                       bf16* y, std::int64_t ldy, float* rstd) const override {
    DeviceBuffer<float> xf(n * dim), yf(n * dim);
    widen_rows(x, ldx, n, dim, xf.data(), dim);
    cuda::rmsnorm_forward(xf.data(), dim, w, n, dim, eps, yf.data(), dim, rstd);
    round_rows(yf.data(), dim, n, dim, y, ldy);
  }
  void rmsnorm_backward(const float* dy, std::int64_t lddy, const float* x, std::int64_t ldx, const float* w,
                        const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx,
                        Accumulate acc, float* dw) const override {
    cuda::rmsnorm_backward(dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc, dw);
  }
  void rmsnorm_backward(const double*, std::int64_t, const double*, std::int64_t, const double*, const double*,
                        std::int64_t, std::int64_t, double*, std::int64_t, Accumulate, double*) const override {
    no_fp64("rmsnorm_backward");
  }
  void rmsnorm_backward(const float* dy, std::int64_t lddy, const bf16* x, std::int64_t ldx, const float* w,
                        const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx,
                        Accumulate acc, float* dw) const override {
    DeviceBuffer<float> xf(n * dim);
    widen_rows(x, ldx, n, dim, xf.data(), dim);
    cuda::rmsnorm_backward(dy, lddy, xf.data(), dim, w, rstd, n, dim, dx, lddx, acc, dw);
  }

  void rope_forward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* x,
                    std::int64_t ld) const override {
    cuda::rope_forward(ropes_.get(t), pos, n, heads, x, ld);
  }
  void rope_forward(const RopeTable<double>&, const std::int32_t*, std::int64_t, std::int64_t, double*,
                    std::int64_t) const override {
    no_fp64("rope_forward");
  }
  // The rotation of a copy of x, rounded into out: x is left as it was (kernels/rope.h).
  void rope_forward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                    const float* x, std::int64_t ld, bf16* out) const override {
    rotated_rounded(t, pos, n, heads, x, ld, out, /*forward=*/true);
  }
  void rope_backward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* dx,
                     std::int64_t ld) const override {
    cuda::rope_backward(ropes_.get(t), pos, n, heads, dx, ld);
  }
  void rope_backward(const RopeTable<double>&, const std::int32_t*, std::int64_t, std::int64_t, double*,
                     std::int64_t) const override {
    no_fp64("rope_backward");
  }
  void rope_backward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                     const float* dx, std::int64_t ld, bf16* out) const override {
    rotated_rounded(t, pos, n, heads, dx, ld, out, /*forward=*/false);
  }

  void swiglu_forward(const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu, std::int64_t n,
                      std::int64_t width, float* out, std::int64_t ldo) const override {
    cuda::swiglu_forward(gate, ldg, up, ldu, n, width, out, ldo);
  }
  void swiglu_forward(const double*, std::int64_t, const double*, std::int64_t, std::int64_t, std::int64_t, double*,
                      std::int64_t) const override {
    no_fp64("swiglu_forward");
  }
  void swiglu_forward(const bf16* gate, std::int64_t ldg, const bf16* up, std::int64_t ldu, std::int64_t n,
                      std::int64_t width, bf16* out, std::int64_t ldo) const override {
    cuda::swiglu_forward(gate, ldg, up, ldu, n, width, out, ldo);
  }
  void swiglu_backward(const float* dout, std::int64_t lddo, const float* gate, std::int64_t ldg, const float* up,
                       std::int64_t ldu, std::int64_t n, std::int64_t width, float* dgate, std::int64_t lddg,
                       float* dup, std::int64_t lddu) const override {
    cuda::swiglu_backward(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
  }
  void swiglu_backward(const double*, std::int64_t, const double*, std::int64_t, const double*, std::int64_t,
                       std::int64_t, std::int64_t, double*, std::int64_t, double*, std::int64_t) const override {
    no_fp64("swiglu_backward");
  }
  void swiglu_backward(const float* dout, std::int64_t lddo, const bf16* gate, std::int64_t ldg, const bf16* up,
                       std::int64_t ldu, std::int64_t n, std::int64_t width, bf16* dgate, std::int64_t lddg, bf16* dup,
                       std::int64_t lddu) const override {
    cuda::swiglu_backward(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
  }

  void embedding_forward(const std::int32_t* ids, std::int64_t n, const float* table, std::int64_t vocab_begin,
                         std::int64_t rows, std::int64_t dim, float* out) const override {
    cuda::embedding_forward(ids, n, table, vocab_begin, rows, dim, out);
  }
  void embedding_forward(const std::int32_t*, std::int64_t, const double*, std::int64_t, std::int64_t, std::int64_t,
                         double*) const override {
    no_fp64("embedding_forward");
  }
  void embedding_forward(const std::int32_t* ids, std::int64_t n, const bf16* table, std::int64_t vocab_begin,
                         std::int64_t rows, std::int64_t dim, float* out) const override {
    cuda::embedding_forward(ids, n, table, vocab_begin, rows, dim, out);
  }
  void embedding_backward(const std::int32_t* ids, std::int64_t n, const float* dout, std::int64_t vocab_begin,
                          std::int64_t rows, std::int64_t dim, float* dtable) const override {
    cuda::embedding_backward(ids, n, dout, vocab_begin, rows, dim, dtable);
  }
  void embedding_backward(const std::int32_t*, std::int64_t, const double*, std::int64_t, std::int64_t, std::int64_t,
                          double*) const override {
    no_fp64("embedding_backward");
  }

  void ce_shard_stats(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                      std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                      float* target_logit) const override {
    cuda::ce_shard_stats(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit);
  }
  void ce_shard_stats(const double*, std::int64_t, std::int64_t, const double*, std::int64_t, std::int64_t,
                      const std::int32_t*, double*, double*, double*) const override {
    no_fp64("ce_shard_stats");
  }
  void ce_shard_stats(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                      std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                      float* target_logit) const override {
    cuda::ce_shard_stats(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit);
  }
  CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const float* row_max, const float* row_sumexp,
                                    const float* target_logit, const std::int32_t* targets, float* lse) const override {
    return cuda::ce_combine_stats(n, shards, row_max, row_sumexp, target_logit, targets, lse);
  }
  CrossEntropyLoss ce_combine_stats(std::int64_t, std::int64_t, const double*, const double*, const double*,
                                    const std::int32_t*, double*) const override {
    no_fp64("ce_combine_stats");
  }
  void ce_shard_backward(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                         std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                         float* dw) const override {
    cuda::ce_shard_backward(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw);
  }
  void ce_shard_backward(const double*, std::int64_t, std::int64_t, const double*, std::int64_t, std::int64_t,
                         const std::int32_t*, const double*, double, double*, double*) const override {
    no_fp64("ce_shard_backward");
  }
  void ce_shard_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                         std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                         float* dw) const override {
    cuda::ce_shard_backward(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw);
  }
  // The whole vocabulary as one shard: its statistics, combined into lse and the loss.
  CrossEntropyLoss cross_entropy_forward(const float* h, std::int64_t n, std::int64_t dim, const float* w,
                                         std::int64_t vocab, const std::int32_t* targets, float* lse) const override {
    return one_shard_loss(h, n, dim, w, vocab, targets, lse);
  }
  CrossEntropyLoss cross_entropy_forward(const double*, std::int64_t, std::int64_t, const double*, std::int64_t,
                                         const std::int32_t*, double*) const override {
    no_fp64("cross_entropy_forward");
  }
  CrossEntropyLoss cross_entropy_forward_backward(const float* h, std::int64_t n, std::int64_t dim, const float* w,
                                                  std::int64_t vocab, const std::int32_t* targets, float scale,
                                                  float* lse, float* dh, float* dw) const override {
    const CrossEntropyLoss loss = one_shard_loss(h, n, dim, w, vocab, targets, lse);
    cuda::ce_shard_backward(h, n, dim, w, 0, vocab, targets, lse, scale, dh, dw);
    return loss;
  }
  CrossEntropyLoss cross_entropy_forward_backward(const double*, std::int64_t, std::int64_t, const double*,
                                                  std::int64_t, const std::int32_t*, double, double*, double*,
                                                  double*) const override {
    no_fp64("cross_entropy_forward_backward");
  }
  CrossEntropyLoss cross_entropy_forward_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w,
                                                  std::int64_t vocab, const std::int32_t* targets, float scale,
                                                  float* lse, float* dh, float* dw) const override {
    const CrossEntropyLoss loss = one_shard_loss(h, n, dim, w, vocab, targets, lse);
    cuda::ce_shard_backward(h, n, dim, w, 0, vocab, targets, lse, scale, dh, dw);
    return loss;
  }

  // The clip factor applied to a scaled copy of the gradients (they are left as they were), and the
  // bf16 copy rounded from the new weights: kernels/optim.h's contract from the multi-tensor kernel.
  void adamw_step(float* params, const float* grads, float* m, float* v, std::int64_t n, const AdamWConfig& cfg,
                  std::int64_t step, float grad_scale, bf16* rounded) const override {
    if (n <= 0) return;
    DeviceBuffer<float> scaled;
    const float* g = grads;
    if (grad_scale != 1.0f) {
      scaled = DeviceBuffer<float>(n);
      copy_device(scaled.data(), grads, static_cast<std::size_t>(n) * sizeof(float));
      scale_buffer(scaled.data(), n, grad_scale);
      g = scaled.data();
    }
    cuda::adamw_step({AdamWTensor{params, g, m, v, n}}, cfg, step);
    if (rounded != nullptr) cuda::to_bf16(params, n, rounded);
  }
  void adamw_step(double*, const double*, double*, double*, std::int64_t, const AdamWConfig&, std::int64_t,
                  double) const override {
    no_fp64("adamw_step");
  }
  double sum_squares(const float* x, std::int64_t n) const override {
    return n <= 0 ? 0.0 : cuda::sum_squares({x}, {n});
  }
  double sum_squares(const double*, std::int64_t) const override { no_fp64("sum_squares"); }

 private:
  static void add_into(const float* x, std::int64_t n, float* y) {
    if (n <= 0) return;
    add_kernel<float><<<grid_for(n, kThreads), kThreads, 0, stream()>>>(x, n, y);
    HERD_CUDA_LAUNCHED("add");
  }

  void rotated_rounded(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                       const float* x, std::int64_t ld, bf16* out, bool forward) const {
    const std::int64_t width = heads * t.config().head_dim;
    DeviceBuffer<float> tmp(n * width);
    copy_rows(x, static_cast<std::size_t>(ld) * sizeof(float), tmp.data(),
              static_cast<std::size_t>(width) * sizeof(float), static_cast<std::size_t>(width) * sizeof(float), n);
    if (forward) {
      cuda::rope_forward(ropes_.get(t), pos, n, heads, tmp.data(), width);
    } else {
      cuda::rope_backward(ropes_.get(t), pos, n, heads, tmp.data(), width);
    }
    round_rows(tmp.data(), width, n, width, out, ld);
  }

  template <typename In>
  static CrossEntropyLoss one_shard_loss(const In* h, std::int64_t n, std::int64_t dim, const In* w, std::int64_t vocab,
                                         const std::int32_t* targets, float* lse) {
    DeviceBuffer<float> stats(3 * n);
    cuda::ce_shard_stats(h, n, dim, w, 0, vocab, targets, stats.data(), stats.data() + n, stats.data() + 2 * n);
    return cuda::ce_combine_stats(n, 1, stats.data(), stats.data() + n, stats.data() + 2 * n, targets, lse);
  }

  mutable RopeTables ropes_;
};

const CudaOps& the_ops() {
  static const CudaOps ops;
  return ops;
}

[[maybe_unused]] const bool registered = [] {
  register_ops(&the_ops());
  return true;
}();

}  // namespace

const Ops& device_ops() { return the_ops(); }

}  // namespace herd::kernels::cuda
