// The CPU's op interface (kernels/ops.h) and the registry of the devices' interfaces: every method is
// the CPU function of kernels/*.h of the same name, so a layer running through it computes what it
// computes calling those functions.
#include "herd/kernels/ops.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "herd/core/aligned.h"
#include "herd/core/check.h"
#include "herd/kernels/convert.h"
#include "herd/kernels/copy.h"
#include "herd/kernels/embedding.h"
#include "herd/kernels/swiglu.h"

namespace herd::kernels {
namespace {

template <typename T>
void add_into(const T* x, std::int64_t n, T* y) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}

class CpuOps final : public Ops {
 public:
  Device device() const override { return Device::kCpu; }

  void* allocate(std::size_t bytes) const override { return aligned_bytes(bytes); }
  void deallocate(void* p) const override { std::free(p); }
  void copy_from_host(const void* host, void* dst, std::size_t bytes) const override { copy_buffer(host, dst, bytes); }
  void copy_to_host(const void* src, void* host, std::size_t bytes) const override { copy_buffer(src, host, bytes); }
  void synchronize() const override {}
  bool holds(const void*) const override { return true; }
  void* queue() const override { return nullptr; }
  double peak_allocated_bytes() const override { return -1; }

  void copy(const void* src, void* dst, std::size_t bytes) const override { copy_buffer(src, dst, bytes); }
  void copy_rows(const void* src, std::size_t src_pitch, void* dst, std::size_t dst_pitch, std::size_t row_bytes,
                 std::int64_t rows) const override {
    const auto* s = static_cast<const unsigned char*>(src);
    auto* d = static_cast<unsigned char*>(dst);
    for (std::int64_t r = 0; r < rows; ++r) {
      std::memcpy(d + static_cast<std::size_t>(r) * dst_pitch, s + static_cast<std::size_t>(r) * src_pitch, row_bytes);
    }
  }
  void zero(void* dst, std::size_t bytes) const override { zero_buffer(dst, bytes); }
  void add(const float* x, std::int64_t n, float* y) const override { add_into(x, n, y); }
  void add(const double* x, std::int64_t n, double* y) const override { add_into(x, n, y); }

  void to_bf16(const float* x, std::int64_t n, bf16* out) const override { kernels::to_bf16(x, n, out); }
  void to_float(const bf16* x, std::int64_t n, float* out) const override { kernels::to_float(x, n, out); }
  void round_to_bf16(float* x, std::int64_t n, bf16* out) const override { kernels::round_to_bf16(x, n, out); }

  void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
            std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) const override {
    kernels::gemm<float>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
            std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
            std::int64_t ldc) const override {
    kernels::gemm<double>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                 std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c,
                 std::int64_t ldc) const override {
    kernels::gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_bf16_rounded(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a,
                         std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc) const override {
    kernels::gemm_bf16_rounded(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
  }

  void attention_forward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k, const float* v,
                         float* out, float* lse) const override {
    kernels::attention_forward<float>(d, m, q, k, v, out, lse);
  }
  void attention_forward(const AttentionDims& d, const AttentionMask& m, const double* q, const double* k,
                         const double* v, double* out, double* lse) const override {
    kernels::attention_forward<double>(d, m, q, k, v, out, lse);
  }
  void attention_forward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                         float* out, float* lse) const override {
    kernels::attention_forward(d, m, q, k, v, out, lse);
  }
  void attention_backward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const float* dout, float* dq, float* dk,
                          float* dv) const override {
    kernels::attention_backward<float>(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  }
  void attention_backward(const AttentionDims& d, const AttentionMask& m, const double* q, const double* k,
                          const double* v, const double* out, const double* lse, const double* dout, double* dq,
                          double* dk, double* dv) const override {
    kernels::attention_backward<double>(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  }
  void attention_backward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                          const bf16* out, const float* lse, const float* dout, float* dq, float* dk,
                          float* dv) const override {
    kernels::attention_backward(d, m, q, k, v, out, lse, dout, dq, dk, dv);
  }

  void rmsnorm_forward(const float* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                       float* y, std::int64_t ldy, float* rstd) const override {
    kernels::rmsnorm_forward<float>(x, ldx, w, n, dim, eps, y, ldy, rstd);
  }
  void rmsnorm_forward(const double* x, std::int64_t ldx, const double* w, std::int64_t n, std::int64_t dim, double eps,
                       double* y, std::int64_t ldy, double* rstd) const override {
    kernels::rmsnorm_forward<double>(x, ldx, w, n, dim, eps, y, ldy, rstd);
  }
  void rmsnorm_forward(const bf16* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                       bf16* y, std::int64_t ldy, float* rstd) const override {
    kernels::rmsnorm_forward(x, ldx, w, n, dim, eps, y, ldy, rstd);
  }
  void rmsnorm_backward(const float* dy, std::int64_t lddy, const float* x, std::int64_t ldx, const float* w,
                        const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx,
                        Accumulate acc, float* dw) const override {
    kernels::rmsnorm_backward<float>(dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc, dw);
  }
  void rmsnorm_backward(const double* dy, std::int64_t lddy, const double* x, std::int64_t ldx, const double* w,
                        const double* rstd, std::int64_t n, std::int64_t dim, double* dx, std::int64_t lddx,
                        Accumulate acc, double* dw) const override {
    kernels::rmsnorm_backward<double>(dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc, dw);
  }
  void rmsnorm_backward(const float* dy, std::int64_t lddy, const bf16* x, std::int64_t ldx, const float* w,
                        const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx,
                        Accumulate acc, float* dw) const override {
    kernels::rmsnorm_backward(dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc, dw);
  }

  void rope_forward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* x,
                    std::int64_t ld) const override {
    kernels::rope_forward<float>(t, pos, n, heads, x, ld);
  }
  void rope_forward(const RopeTable<double>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads, double* x,
                    std::int64_t ld) const override {
    kernels::rope_forward<double>(t, pos, n, heads, x, ld);
  }
  void rope_forward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                    const float* x, std::int64_t ld, bf16* out) const override {
    kernels::rope_forward(t, pos, n, heads, x, ld, out);
  }
  void rope_backward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* dx,
                     std::int64_t ld) const override {
    kernels::rope_backward<float>(t, pos, n, heads, dx, ld);
  }
  void rope_backward(const RopeTable<double>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                     double* dx, std::int64_t ld) const override {
    kernels::rope_backward<double>(t, pos, n, heads, dx, ld);
  }
  void rope_backward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                     const float* dx, std::int64_t ld, bf16* out) const override {
    kernels::rope_backward(t, pos, n, heads, dx, ld, out);
  }

  void swiglu_forward(const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu, std::int64_t n,
                      std::int64_t width, float* out, std::int64_t ldo) const override {
    kernels::swiglu_forward<float>(gate, ldg, up, ldu, n, width, out, ldo);
  }
  void swiglu_forward(const double* gate, std::int64_t ldg, const double* up, std::int64_t ldu, std::int64_t n,
                      std::int64_t width, double* out, std::int64_t ldo) const override {
    kernels::swiglu_forward<double>(gate, ldg, up, ldu, n, width, out, ldo);
  }
  void swiglu_forward(const bf16* gate, std::int64_t ldg, const bf16* up, std::int64_t ldu, std::int64_t n,
                      std::int64_t width, bf16* out, std::int64_t ldo) const override {
    kernels::swiglu_forward(gate, ldg, up, ldu, n, width, out, ldo);
  }
  void swiglu_backward(const float* dout, std::int64_t lddo, const float* gate, std::int64_t ldg, const float* up,
                       std::int64_t ldu, std::int64_t n, std::int64_t width, float* dgate, std::int64_t lddg,
                       float* dup, std::int64_t lddu) const override {
    kernels::swiglu_backward<float>(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
  }
  void swiglu_backward(const double* dout, std::int64_t lddo, const double* gate, std::int64_t ldg, const double* up,
                       std::int64_t ldu, std::int64_t n, std::int64_t width, double* dgate, std::int64_t lddg,
                       double* dup, std::int64_t lddu) const override {
    kernels::swiglu_backward<double>(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
  }
  void swiglu_backward(const float* dout, std::int64_t lddo, const bf16* gate, std::int64_t ldg, const bf16* up,
                       std::int64_t ldu, std::int64_t n, std::int64_t width, bf16* dgate, std::int64_t lddg, bf16* dup,
                       std::int64_t lddu) const override {
    kernels::swiglu_backward(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
  }

  void embedding_forward(const std::int32_t* ids, std::int64_t n, const float* table, std::int64_t vocab_begin,
                         std::int64_t rows, std::int64_t dim, float* out) const override {
    kernels::embedding_forward<float>(ids, n, table, vocab_begin, rows, dim, out);
  }
  void embedding_forward(const std::int32_t* ids, std::int64_t n, const double* table, std::int64_t vocab_begin,
                         std::int64_t rows, std::int64_t dim, double* out) const override {
    kernels::embedding_forward<double>(ids, n, table, vocab_begin, rows, dim, out);
  }
  void embedding_forward(const std::int32_t* ids, std::int64_t n, const bf16* table, std::int64_t vocab_begin,
                         std::int64_t rows, std::int64_t dim, float* out) const override {
    kernels::embedding_forward(ids, n, table, vocab_begin, rows, dim, out);
  }
  void embedding_backward(const std::int32_t* ids, std::int64_t n, const float* dout, std::int64_t vocab_begin,
                          std::int64_t rows, std::int64_t dim, float* dtable) const override {
    kernels::embedding_backward<float>(ids, n, dout, vocab_begin, rows, dim, dtable);
  }
  void embedding_backward(const std::int32_t* ids, std::int64_t n, const double* dout, std::int64_t vocab_begin,
                          std::int64_t rows, std::int64_t dim, double* dtable) const override {
    kernels::embedding_backward<double>(ids, n, dout, vocab_begin, rows, dim, dtable);
  }

  void ce_shard_stats(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                      std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                      float* target_logit) const override {
    kernels::ce_shard_stats<float>(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit);
  }
  void ce_shard_stats(const double* h, std::int64_t n, std::int64_t dim, const double* w, std::int64_t vocab_begin,
                      std::int64_t shard, const std::int32_t* targets, double* row_max, double* row_sumexp,
                      double* target_logit) const override {
    kernels::ce_shard_stats<double>(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit);
  }
  void ce_shard_stats(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                      std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                      float* target_logit) const override {
    kernels::ce_shard_stats(h, n, dim, w, vocab_begin, shard, targets, row_max, row_sumexp, target_logit);
  }
  CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const float* row_max, const float* row_sumexp,
                                    const float* target_logit, const std::int32_t* targets, float* lse) const override {
    return kernels::ce_combine_stats<float>(n, shards, row_max, row_sumexp, target_logit, targets, lse);
  }
  CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const double* row_max,
                                    const double* row_sumexp, const double* target_logit, const std::int32_t* targets,
                                    double* lse) const override {
    return kernels::ce_combine_stats<double>(n, shards, row_max, row_sumexp, target_logit, targets, lse);
  }
  void ce_shard_backward(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                         std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                         float* dw) const override {
    kernels::ce_shard_backward<float>(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw);
  }
  void ce_shard_backward(const double* h, std::int64_t n, std::int64_t dim, const double* w, std::int64_t vocab_begin,
                         std::int64_t shard, const std::int32_t* targets, const double* lse, double scale, double* dh,
                         double* dw) const override {
    kernels::ce_shard_backward<double>(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw);
  }
  void ce_shard_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                         std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                         float* dw) const override {
    kernels::ce_shard_backward(h, n, dim, w, vocab_begin, shard, targets, lse, scale, dh, dw);
  }
  CrossEntropyLoss cross_entropy_forward(const float* h, std::int64_t n, std::int64_t dim, const float* w,
                                         std::int64_t vocab, const std::int32_t* targets, float* lse) const override {
    return kernels::cross_entropy_forward<float>(h, n, dim, w, vocab, targets, lse);
  }
  CrossEntropyLoss cross_entropy_forward(const double* h, std::int64_t n, std::int64_t dim, const double* w,
                                         std::int64_t vocab, const std::int32_t* targets, double* lse) const override {
    return kernels::cross_entropy_forward<double>(h, n, dim, w, vocab, targets, lse);
  }
  CrossEntropyLoss cross_entropy_forward_backward(const float* h, std::int64_t n, std::int64_t dim, const float* w,
                                                  std::int64_t vocab, const std::int32_t* targets, float scale,
                                                  float* lse, float* dh, float* dw) const override {
    return kernels::cross_entropy_forward_backward<float>(h, n, dim, w, vocab, targets, scale, lse, dh, dw);
  }
  CrossEntropyLoss cross_entropy_forward_backward(const double* h, std::int64_t n, std::int64_t dim, const double* w,
                                                  std::int64_t vocab, const std::int32_t* targets, double scale,
                                                  double* lse, double* dh, double* dw) const override {
    return kernels::cross_entropy_forward_backward<double>(h, n, dim, w, vocab, targets, scale, lse, dh, dw);
  }
  CrossEntropyLoss cross_entropy_forward_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w,
                                                  std::int64_t vocab, const std::int32_t* targets, float scale,
                                                  float* lse, float* dh, float* dw) const override {
    return kernels::cross_entropy_forward_backward(h, n, dim, w, vocab, targets, scale, lse, dh, dw);
  }

  void adamw_step(float* params, const float* grads, float* m, float* v, std::int64_t n, const AdamWConfig& cfg,
                  std::int64_t step, float grad_scale, bf16* rounded) const override {
    kernels::adamw_step<float>(params, grads, m, v, n, cfg, step, grad_scale, rounded);
  }
  void adamw_step(double* params, const double* grads, double* m, double* v, std::int64_t n, const AdamWConfig& cfg,
                  std::int64_t step, double grad_scale) const override {
    kernels::adamw_step<double>(params, grads, m, v, n, cfg, step, grad_scale);
  }
  double sum_squares(const float* x, std::int64_t n) const override { return kernels::sum_squares<float>(x, n); }
  double sum_squares(const double* x, std::int64_t n) const override { return kernels::sum_squares<double>(x, n); }
};

const CpuOps& the_cpu_ops() {
  static const CpuOps ops;
  return ops;
}

std::array<const Ops*, 2>& registry() {
  static std::array<const Ops*, 2> r{};
  return r;
}

}  // namespace

const Ops& cpu_ops() { return the_cpu_ops(); }

bool has_ops(Device d) { return d == Device::kCpu || registry()[static_cast<std::size_t>(d)] != nullptr; }

const Ops& ops_for(Device d) {
  if (d == Device::kCpu) return cpu_ops();
  const Ops* o = registry()[static_cast<std::size_t>(d)];
  HERD_CHECK(o != nullptr, "no op interface for device '", device_name(d), "' in this build (check_device first)");
  return *o;
}

void register_ops(const Ops* ops) {
  if (ops != nullptr) registry()[static_cast<std::size_t>(ops->device())] = ops;
}

}  // namespace herd::kernels
