// The op interface: every kernel the layers (nn/) and the distributed stage (parallel/) call, with the
// memory they call it on, behind one abstract class per device. A run picks its implementation once
// from its device (`train.device`, kernels/device.h: `ops_for(Device)`), and the layers and the stage
// hold it from construction, so the same step code runs on the CPU or on a GPU, as ggml's backends or
// llm.c's trainer over its own kernels do.
//
// Contracts: each method is the free function of the same name in kernels/*.h (gemm.h, attention.h,
// rmsnorm.h, rope.h, swiglu.h, embedding.h, cross_entropy.h, optim.h, convert.h, copy.h), with every
// pointer in the memory of this interface's device (allocate()), except where a line says host. The
// CPU implementation (kernels/cpu/ops.cpp) calls those functions, so going through it changes no
// number. A device implementation registers itself when the binary loads (register_ops), as a
// DeviceBackend does; on a GPU a method returns once its work is enqueued on the calling thread's
// compute stream, and the methods that return a value to the host (sum_squares, the losses) wait for it.
//
// Memory: `Buffer` owns bytes of one device, allocated and freed by that device's interface, and says
// which device holds them (`device()`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "herd/core/bf16.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/device.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/optim.h"
#include "herd/kernels/rmsnorm.h"
#include "herd/kernels/rope.h"

namespace herd::kernels {

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;

  // --- Memory of this device.
  // `bytes` rounded up to 64; 64-byte aligned; throws herd::AllocationFailed (core/aligned.h) when full.
  virtual void* allocate(std::size_t bytes) const = 0;
  virtual void deallocate(void* p) const = 0;  // null is ignored
  // host (bytes) -> dst, and src -> host (bytes); both return when the bytes have arrived.
  virtual void copy_from_host(const void* host, void* dst, std::size_t bytes) const = 0;
  virtual void copy_to_host(const void* src, void* host, std::size_t bytes) const = 0;
  // Waits until every op this thread enqueued has finished (the CPU's ops finish before they return).
  virtual void synchronize() const = 0;
  // Whether `p` points into this device's memory (the CPU's: any host pointer), for the code that
  // receives pointers of either kind (the communicators, comm/device_memory.h).
  virtual bool holds(const void* p) const = 0;
  // The calling thread's queue of work on this device (a cudaStream_t on a GPU), for libraries that
  // order their own streams after it (NCCL); null on the CPU, whose ops finish before they return.
  virtual void* queue() const = 0;
  // The most bytes this device's allocator has handed out at once in this process, for the memory
  // report; -1 where the device does not count them (the CPU, whose arena the trainer measures itself).
  virtual double peak_allocated_bytes() const = 0;

  // --- Copies, fills and element-wise sums (kernels/copy.h).
  virtual void copy(const void* src, void* dst, std::size_t bytes) const = 0;  // no overlap
  // rows x row_bytes from src (row starts src_pitch bytes apart) to dst (dst_pitch apart), no overlap:
  // the column blocks and strided rows of the TP and CP layouts.
  virtual void copy_rows(const void* src, std::size_t src_pitch, void* dst, std::size_t dst_pitch,
                         std::size_t row_bytes, std::int64_t rows) const = 0;
  virtual void zero(void* dst, std::size_t bytes) const = 0;
  // y (n) += x (n), each sum of two elements rounded once, as `y[i] += x[i]`.
  virtual void add(const float* x, std::int64_t n, float* y) const = 0;
  virtual void add(const double* x, std::int64_t n, double* y) const = 0;

  // --- bf16 conversions (kernels/convert.h).
  virtual void to_bf16(const float* x, std::int64_t n, bf16* out) const = 0;
  virtual void to_float(const bf16* x, std::int64_t n, float* out) const = 0;
  virtual void round_to_bf16(float* x, std::int64_t n, bf16* out) const = 0;

  // --- GEMM (kernels/gemm.h).
  virtual void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                    std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                    std::int64_t ldc) const = 0;
  virtual void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
                    std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
                    std::int64_t ldc) const = 0;
  virtual void gemm_bf16(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                         std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c,
                         std::int64_t ldc) const = 0;
  virtual void gemm_bf16_rounded(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a,
                                 std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c,
                                 std::int64_t ldc) const = 0;

  // --- Attention (kernels/attention.h). The mask arrays are in this device's memory too.
  virtual void attention_forward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k,
                                 const float* v, float* out, float* lse) const = 0;
  virtual void attention_forward(const AttentionDims& d, const AttentionMask& m, const double* q, const double* k,
                                 const double* v, double* out, double* lse) const = 0;
  virtual void attention_forward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k,
                                 const bf16* v, float* out, float* lse) const = 0;
  virtual void attention_backward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k,
                                  const float* v, const float* out, const float* lse, const float* dout, float* dq,
                                  float* dk, float* dv) const = 0;
  virtual void attention_backward(const AttentionDims& d, const AttentionMask& m, const double* q, const double* k,
                                  const double* v, const double* out, const double* lse, const double* dout, double* dq,
                                  double* dk, double* dv) const = 0;
  virtual void attention_backward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k,
                                  const bf16* v, const bf16* out, const float* lse, const float* dout, float* dq,
                                  float* dk, float* dv) const = 0;

  // --- RMSNorm (kernels/rmsnorm.h).
  virtual void rmsnorm_forward(const float* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim,
                               double eps, float* y, std::int64_t ldy, float* rstd) const = 0;
  virtual void rmsnorm_forward(const double* x, std::int64_t ldx, const double* w, std::int64_t n, std::int64_t dim,
                               double eps, double* y, std::int64_t ldy, double* rstd) const = 0;
  virtual void rmsnorm_forward(const bf16* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim,
                               double eps, bf16* y, std::int64_t ldy, float* rstd) const = 0;
  virtual void rmsnorm_backward(const float* dy, std::int64_t lddy, const float* x, std::int64_t ldx, const float* w,
                                const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx,
                                Accumulate acc, float* dw) const = 0;
  virtual void rmsnorm_backward(const double* dy, std::int64_t lddy, const double* x, std::int64_t ldx, const double* w,
                                const double* rstd, std::int64_t n, std::int64_t dim, double* dx, std::int64_t lddx,
                                Accumulate acc, double* dw) const = 0;
  virtual void rmsnorm_backward(const float* dy, std::int64_t lddy, const bf16* x, std::int64_t ldx, const float* w,
                                const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx,
                                Accumulate acc, float* dw) const = 0;

  // --- RoPE (kernels/rope.h). The table is the host's; a device implementation keeps its own copy of
  // each table it is given (the table must outlive the interface's use of it). pos is device memory.
  virtual void rope_forward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                            float* x, std::int64_t ld) const = 0;
  virtual void rope_forward(const RopeTable<double>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                            double* x, std::int64_t ld) const = 0;
  virtual void rope_forward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                            const float* x, std::int64_t ld, bf16* out) const = 0;
  virtual void rope_backward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                             float* dx, std::int64_t ld) const = 0;
  virtual void rope_backward(const RopeTable<double>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                             double* dx, std::int64_t ld) const = 0;
  virtual void rope_backward(const RopeTable<float>& t, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                             const float* dx, std::int64_t ld, bf16* out) const = 0;

  // --- SwiGLU (kernels/swiglu.h).
  virtual void swiglu_forward(const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu, std::int64_t n,
                              std::int64_t width, float* out, std::int64_t ldo) const = 0;
  virtual void swiglu_forward(const double* gate, std::int64_t ldg, const double* up, std::int64_t ldu, std::int64_t n,
                              std::int64_t width, double* out, std::int64_t ldo) const = 0;
  virtual void swiglu_forward(const bf16* gate, std::int64_t ldg, const bf16* up, std::int64_t ldu, std::int64_t n,
                              std::int64_t width, bf16* out, std::int64_t ldo) const = 0;
  virtual void swiglu_backward(const float* dout, std::int64_t lddo, const float* gate, std::int64_t ldg,
                               const float* up, std::int64_t ldu, std::int64_t n, std::int64_t width, float* dgate,
                               std::int64_t lddg, float* dup, std::int64_t lddu) const = 0;
  virtual void swiglu_backward(const double* dout, std::int64_t lddo, const double* gate, std::int64_t ldg,
                               const double* up, std::int64_t ldu, std::int64_t n, std::int64_t width, double* dgate,
                               std::int64_t lddg, double* dup, std::int64_t lddu) const = 0;
  virtual void swiglu_backward(const float* dout, std::int64_t lddo, const bf16* gate, std::int64_t ldg, const bf16* up,
                               std::int64_t ldu, std::int64_t n, std::int64_t width, bf16* dgate, std::int64_t lddg,
                               bf16* dup, std::int64_t lddu) const = 0;

  // --- Embedding (kernels/embedding.h). ids in this device's memory.
  virtual void embedding_forward(const std::int32_t* ids, std::int64_t n, const float* table, std::int64_t vocab_begin,
                                 std::int64_t rows, std::int64_t dim, float* out) const = 0;
  virtual void embedding_forward(const std::int32_t* ids, std::int64_t n, const double* table, std::int64_t vocab_begin,
                                 std::int64_t rows, std::int64_t dim, double* out) const = 0;
  virtual void embedding_forward(const std::int32_t* ids, std::int64_t n, const bf16* table, std::int64_t vocab_begin,
                                 std::int64_t rows, std::int64_t dim, float* out) const = 0;
  virtual void embedding_backward(const std::int32_t* ids, std::int64_t n, const float* dout, std::int64_t vocab_begin,
                                  std::int64_t rows, std::int64_t dim, float* dtable) const = 0;
  virtual void embedding_backward(const std::int32_t* ids, std::int64_t n, const double* dout, std::int64_t vocab_begin,
                                  std::int64_t rows, std::int64_t dim, double* dtable) const = 0;

  // --- Cross-entropy (kernels/cross_entropy.h), with the kernels' default tiles and their own
  // workspace. The losses are returned to the host.
  virtual void ce_shard_stats(const float* h, std::int64_t n, std::int64_t dim, const float* w,
                              std::int64_t vocab_begin, std::int64_t shard, const std::int32_t* targets, float* row_max,
                              float* row_sumexp, float* target_logit) const = 0;
  virtual void ce_shard_stats(const double* h, std::int64_t n, std::int64_t dim, const double* w,
                              std::int64_t vocab_begin, std::int64_t shard, const std::int32_t* targets,
                              double* row_max, double* row_sumexp, double* target_logit) const = 0;
  virtual void ce_shard_stats(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                              std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                              float* target_logit) const = 0;
  virtual CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const float* row_max,
                                            const float* row_sumexp, const float* target_logit,
                                            const std::int32_t* targets, float* lse) const = 0;
  virtual CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const double* row_max,
                                            const double* row_sumexp, const double* target_logit,
                                            const std::int32_t* targets, double* lse) const = 0;
  virtual void ce_shard_backward(const float* h, std::int64_t n, std::int64_t dim, const float* w,
                                 std::int64_t vocab_begin, std::int64_t shard, const std::int32_t* targets,
                                 const float* lse, float scale, float* dh, float* dw) const = 0;
  virtual void ce_shard_backward(const double* h, std::int64_t n, std::int64_t dim, const double* w,
                                 std::int64_t vocab_begin, std::int64_t shard, const std::int32_t* targets,
                                 const double* lse, double scale, double* dh, double* dw) const = 0;
  virtual void ce_shard_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w,
                                 std::int64_t vocab_begin, std::int64_t shard, const std::int32_t* targets,
                                 const float* lse, float scale, float* dh, float* dw) const = 0;
  virtual CrossEntropyLoss cross_entropy_forward(const float* h, std::int64_t n, std::int64_t dim, const float* w,
                                                 std::int64_t vocab, const std::int32_t* targets, float* lse) const = 0;
  virtual CrossEntropyLoss cross_entropy_forward(const double* h, std::int64_t n, std::int64_t dim, const double* w,
                                                 std::int64_t vocab, const std::int32_t* targets,
                                                 double* lse) const = 0;
  virtual CrossEntropyLoss cross_entropy_forward_backward(const float* h, std::int64_t n, std::int64_t dim,
                                                          const float* w, std::int64_t vocab,
                                                          const std::int32_t* targets, float scale, float* lse,
                                                          float* dh, float* dw) const = 0;
  virtual CrossEntropyLoss cross_entropy_forward_backward(const double* h, std::int64_t n, std::int64_t dim,
                                                          const double* w, std::int64_t vocab,
                                                          const std::int32_t* targets, double scale, double* lse,
                                                          double* dh, double* dw) const = 0;
  virtual CrossEntropyLoss cross_entropy_forward_backward(const bf16* h, std::int64_t n, std::int64_t dim,
                                                          const bf16* w, std::int64_t vocab,
                                                          const std::int32_t* targets, float scale, float* lse,
                                                          float* dh, float* dw) const = 0;

  // --- Optimizer (kernels/optim.h). sum_squares returns to the host.
  virtual void adamw_step(float* params, const float* grads, float* m, float* v, std::int64_t n, const AdamWConfig& cfg,
                          std::int64_t step, float grad_scale, bf16* rounded) const = 0;
  virtual void adamw_step(double* params, const double* grads, double* m, double* v, std::int64_t n,
                          const AdamWConfig& cfg, std::int64_t step, double grad_scale) const = 0;
  virtual double sum_squares(const float* x, std::int64_t n) const = 0;
  virtual double sum_squares(const double* x, std::int64_t n) const = 0;
};

// The interface of device `d`: the CPU's always; a device's when its implementation is built in
// (a check failure otherwise: check_device, kernels/device.h, is the user-facing gate before it).
const Ops& ops_for(Device d);
// The CPU's interface (ops_for(Device::kCpu)).
const Ops& cpu_ops();
// Whether `d` has an interface in this binary.
bool has_ops(Device d);
// Called once per device implementation at load time (kernels/cuda/ops.cu); a second registration of
// the same device replaces the first.
void register_ops(const Ops* ops);

// Bytes of one device, owned: allocated by that device's interface and given back to it. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Ops& ops, std::size_t bytes) : ops_(&ops), data_(ops.allocate(bytes)), bytes_(bytes) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept
      : ops_(std::exchange(o.ops_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = std::exchange(o.ops_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset() {
    if (data_ != nullptr) ops_->deallocate(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  // Where the bytes live; the CPU for an empty buffer.
  Device device() const { return ops_ != nullptr ? ops_->device() : Device::kCpu; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  const Ops* ops_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A buffer of `count` elements of T on `ops`'s device, zeroed.
template <typename T>
Buffer zeroed_array(const Ops& ops, std::int64_t count) {
  const std::size_t bytes = sizeof(T) * static_cast<std::size_t>(count);
  Buffer b(ops, bytes);
  ops.zero(b.data(), bytes);
  return b;
}

// A buffer of `count` elements of T on `ops`'s device, uninitialised.
template <typename T>
Buffer array_of(const Ops& ops, std::int64_t count) {
  return Buffer(ops, sizeof(T) * static_cast<std::size_t>(count));
}

}  // namespace herd::kernels
