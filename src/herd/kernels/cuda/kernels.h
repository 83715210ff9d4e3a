// The CUDA implementations of the ops of kernels/: the same contracts as the CPU declarations
// (kernels/gemm.h, attention.h, rmsnorm.h, rope.h, swiglu.h, embedding.h, cross_entropy.h, optim.h,
// convert.h) with every pointer a device pointer, enqueued on the calling thread's compute stream
// (kernels/cuda/runtime.h) and returning once enqueued, unless a line below says otherwise. One .cu file
// per op under kernels/cuda/; tests/kernels/cuda/ holds each against the CPU reference on random
// inputs, forward and backward, and skips when no GPU is visible.
//
// Precision: float ops compute in fp32 (no TF32 unless a line says so); bf16 inputs are widened to
// fp32 in registers, sums accumulate in fp32, and bf16 outputs are rounded to nearest even, as the CPU
// path does, so the CPU and GPU runs of `train.precision = bf16` differ only by summation order.
#pragma once

#include <cstdint>
#include <vector>

#include "herd/core/bf16.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/cross_entropy.h"
#include "herd/kernels/device.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/ops.h"
#include "herd/kernels/optim.h"
#include "herd/kernels/rmsnorm.h"
#include "herd/kernels/rope.h"

namespace herd::kernels::cuda {

// --- GEMM (gemm.cu): cuBLASLt, row-major as kernels/gemm.h (computed as the column-major transpose).
// fp32: CUBLAS_COMPUTE_32F (no TF32). bf16: bf16 A and B, fp32 C and accumulation
// (CUBLAS_COMPUTE_32F), beta as in gemm.h. Workspace and algorithm heuristics are cached per shape.
void gemm(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
void gemm_bf16(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
               std::int64_t lda, const bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);
// The same with a bf16 output C (no accumulation: beta must be 0): forward linears whose outputs are
// saved in bf16.
void gemm_bf16_out(Trans ta, Trans tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                   std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc);

// --- Attention (attention.cu): flash-style causal GQA with the document mask of kernels/attention.h;
// the mask arrays are device pointers. Forward: one thread block per (batch, query head, query tile),
// online softmax, lse kept. Backward: FlashAttention-2 recompute from q, k, lse; dk/dv summed over the
// query heads of a KV head. T = float, or bf16 q/k/v/out/dout with fp32 lse and fp32 softmax.
void attention_forward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k, const float* v,
                       float* out, float* lse);
void attention_backward(const AttentionDims& d, const AttentionMask& m, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, const float* dout, float* dq, float* dk, float* dv);
void attention_forward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                       bf16* out, float* lse);
// dq, dk, dv in fp32 (they feed fp32 weight-gradient GEMMs after conversion, as on the CPU).
void attention_backward(const AttentionDims& d, const AttentionMask& m, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, const float* dout, float* dq, float* dk, float* dv);
// The bf16 calls with head_dim a multiple of 16 (up to 128) run the tensor-core kernels of attention_mma.cu
// (kMma, the default: inline-PTX mma.sync with register-resident accumulators and FlashAttention-2's numerics
// as kernels/attention.h's bf16 paragraph states: P, dO and dS rounded to bf16 where they enter a product).
// kCudaCores, other head dims and every fp32 call run the CUDA-core kernels of attention.cu (fp32 products of
// the widened inputs), the reference the tensor-core kernels are tested against. For tests and benchmarks: set
// it between calls, not while kernels are being enqueued from other threads.
enum class AttentionKernels { kCudaCores, kMma };
void set_attention_kernels(AttentionKernels kernels);
AttentionKernels attention_kernels();
// Where a tensor-core attention call's time goes (benchmarks: herd_bench_gpu's attention split). While a hook is set,
// the kMma path calls hook(part, arg) on the calling thread just before they enqueue each of their kernels
// on the compute stream (kGroupSum: kMma's sum of per-query-head dK / dV partials), so the hook can record an event
// there; the time up to the caller's next event is the part's. nullptr (the default) turns it off. Set it between
// calls, as the selection above.
enum class AttentionPart { kForward, kDelta, kDq, kDkdv, kGroupSum, kCount };
using AttentionPartHook = void (*)(AttentionPart part, void* arg);
void set_attention_part_hook(AttentionPartHook hook, void* arg);

// --- RMSNorm (rmsnorm.cu): one block per row, fp32 statistics. dw accumulates (+=) over rows.
void rmsnorm_forward(const float* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                     float* y, std::int64_t ldy, float* rstd);
void rmsnorm_backward(const float* dy, std::int64_t lddy, const float* x, std::int64_t ldx, const float* w,
                      const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx, Accumulate acc,
                      float* dw);

// --- RoPE (rope.cu): the table's cos/sin copied to the device once.
class DeviceRopeTable {
 public:
  explicit DeviceRopeTable(const RopeTable<float>& host);
  ~DeviceRopeTable();
  DeviceRopeTable(const DeviceRopeTable&) = delete;
  DeviceRopeTable& operator=(const DeviceRopeTable&) = delete;
  const RopeConfig& config() const { return cfg_; }
  std::int64_t max_pos() const { return max_pos_; }
  const float* cos() const { return cos_; }  // (max_pos, D/2), device
  const float* sin() const { return sin_; }

 private:
  RopeConfig cfg_;
  std::int64_t max_pos_ = 0;
  float* cos_ = nullptr;
  float* sin_ = nullptr;
};
// pos is a device array of n positions; x is (n, heads, head_dim) with row stride ld, rotated in place.
void rope_forward(const DeviceRopeTable& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* x,
                  std::int64_t ld);
void rope_backward(const DeviceRopeTable& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* dx,
                   std::int64_t ld);

// --- SwiGLU (swiglu.cu): out = silu(gate) * up, gate math in fp32.
void swiglu_forward(const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu, std::int64_t n,
                    std::int64_t width, float* out, std::int64_t ldo);
void swiglu_backward(const float* dout, std::int64_t lddo, const float* gate, std::int64_t ldg, const float* up,
                     std::int64_t ldu, std::int64_t n, std::int64_t width, float* dgate, std::int64_t lddg, float* dup,
                     std::int64_t lddu);
void swiglu_forward(const bf16* gate, std::int64_t ldg, const bf16* up, std::int64_t ldu, std::int64_t n,
                    std::int64_t width, bf16* out, std::int64_t ldo);
void swiglu_backward(const float* dout, std::int64_t lddo, const bf16* gate, std::int64_t ldg, const bf16* up,
                     std::int64_t ldu, std::int64_t n, std::int64_t width, bf16* dgate, std::int64_t lddg, bf16* dup,
                     std::int64_t lddu);

// --- Embedding (embedding.cu). Rows outside [vocab_begin, vocab_begin + rows) give zeros (forward) and
// are skipped (backward), as on the CPU. The backward accumulates with atomics: fp32 sums in an order
// that may vary run to run (documented in docs/gpu.md).
void embedding_forward(const std::int32_t* ids, std::int64_t n, const float* table, std::int64_t vocab_begin,
                       std::int64_t rows, std::int64_t dim, float* out);
void embedding_forward(const std::int32_t* ids, std::int64_t n, const bf16* table, std::int64_t vocab_begin,
                       std::int64_t rows, std::int64_t dim, float* out);
void embedding_backward(const std::int32_t* ids, std::int64_t n, const float* dout, std::int64_t vocab_begin,
                        std::int64_t rows, std::int64_t dim, float* dtable);

// --- Vocabulary-tiled cross-entropy (cross_entropy.cu): logits tiles by gemm / gemm_bf16 into a device
// workspace (cross_entropy_workspace(tiles) floats, allocated by the caller or, when null, from the
// caching allocator), then per-row max / sum-exp / target logit kernels. Same sharded contract as
// kernels/cross_entropy.h; ce_combine_stats returns the loss sum and count to the host (it
// synchronises the stream).
void ce_shard_stats(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                    float* target_logit, const CrossEntropyTiles& tiles = {}, float* workspace = nullptr);
void ce_shard_stats(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                    std::int64_t shard, const std::int32_t* targets, float* row_max, float* row_sumexp,
                    float* target_logit, const CrossEntropyTiles& tiles = {}, float* workspace = nullptr);
CrossEntropyLoss ce_combine_stats(std::int64_t n, std::int64_t shards, const float* row_max, const float* row_sumexp,
                                  const float* target_logit, const std::int32_t* targets, float* lse);
void ce_shard_backward(const float* h, std::int64_t n, std::int64_t dim, const float* w, std::int64_t vocab_begin,
                       std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                       float* dw, const CrossEntropyTiles& tiles = {}, float* workspace = nullptr);
void ce_shard_backward(const bf16* h, std::int64_t n, std::int64_t dim, const bf16* w, std::int64_t vocab_begin,
                       std::int64_t shard, const std::int32_t* targets, const float* lse, float scale, float* dh,
                       float* dw, const CrossEntropyTiles& tiles = {}, float* workspace = nullptr);

// --- Optimizer and norms (optim.cu). AdamW over many tensors at once: one launch for the whole list
// (a chunked multi-tensor apply, as apex / PyTorch's fused AdamW do), each element updated exactly as
// kernels::adamw_step does it (the same bias corrections, decoupled weight decay).
struct AdamWTensor {
  float* params = nullptr;
  const float* grads = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  std::int64_t n = 0;
};
void adamw_step(const std::vector<AdamWTensor>& tensors, const AdamWConfig& cfg, std::int64_t step);
// The squared L2 norm of many tensors, summed in fp64 on the device; returns to the host (synchronises).
double sum_squares(const std::vector<const float*>& tensors, const std::vector<std::int64_t>& sizes);
void scale_buffer(float* x, std::int64_t n, float s);

// --- bf16 conversions (convert.cu), as kernels/convert.h.
void to_bf16(const float* x, std::int64_t n, bf16* out);
void to_float(const bf16* x, std::int64_t n, float* out);
void round_to_bf16(float* x, std::int64_t n, bf16* out);

// --- calibration (rates.cpp): DeviceBackend::measure_rates of kernels/device.h, on device 0.
DeviceRates measure_device_rates(const DeviceRateShapes& shapes);

// --- The op interface (ops.cu): kernels/ops.h's Ops for Device::kCuda over the functions above, also
// what ops_for(Device::kCuda) returns once the binary has loaded ops.cu (it registers itself).
const Ops& device_ops();

}  // namespace herd::kernels::cuda
