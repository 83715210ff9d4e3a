// The optimizer's kernels on the GPU (kernels/optim.h): multi-tensor AdamW, the squared L2 norm of many
// tensors (fp64) and the in-place scale that gradient clipping applies.
//
// Multi-tensor apply: the tensors are split into chunks of kChunk elements; a launch takes up to
// kMaxTensors tensors, passed by value in one kernel-argument struct (pointers, sizes and the prefix
// sum of their chunk counts, under the 4 KiB parameter limit), so no descriptor copy to the device is
// needed; a longer list takes ceil(count / kMaxTensors) launches. Each block takes chunks in a
// grid-stride loop, finds its tensor in the prefix sums, and its 256 threads stride over the chunk.
//
// adamw_step: the update of kernels/cpu/optim.cpp element by element (the bias corrections and the
// decoupled weight decay computed on the host in double and rounded to fp32 as the CPU does, then the
// same fp32 expressions). sum_squares: each block sums x^2 in double over its chunks and writes one
// partial; one block then adds all partials (a fixed order, so the result is deterministic) and the
// sum is copied back to the host (this synchronises the stream). scale_buffer: a grid-stride loop.
#include <algorithm>
#include <cmath>

#include "herd/core/check.h"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda {
namespace {

constexpr int kMaxTensors = 64;
constexpr std::int64_t kChunk = 65536;
constexpr int kThreads = 256;
constexpr std::int64_t kMaxChunkBlocks = 65535;
constexpr std::int64_t kSumBlocks = 512;  // partials per sum_squares launch

std::int64_t chunks_of(std::int64_t n) { return (n + kChunk - 1) / kChunk; }

struct AdamWArgs {
  float* params[kMaxTensors];
  const float* grads[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  std::int64_t n[kMaxTensors];
  std::int64_t first_chunk[kMaxTensors + 1];  // tensor t owns chunks [first_chunk[t], first_chunk[t + 1])
  int count;
};
static_assert(sizeof(AdamWArgs) + 64 < 4096, "kernel arguments must fit the 4 KiB parameter space");

struct AdamWScalars {
  float decay, step_size, inv_sqrt_bc2, b1, b2, eps;
};

struct SumArgs {
  const float* x[kMaxTensors];
  std::int64_t n[kMaxTensors];
  std::int64_t first_chunk[kMaxTensors + 1];
  int count;
};
static_assert(sizeof(SumArgs) + 64 < 4096, "kernel arguments must fit the 4 KiB parameter space");

// The tensor owning `chunk` (count is at most kMaxTensors: a linear scan, uniform over the block).
__device__ __forceinline__ int tensor_of(const std::int64_t* first_chunk, int count, std::int64_t chunk) {
  int t = 0;
  while (t + 1 < count && first_chunk[t + 1] <= chunk) ++t;
  return t;
}

__global__ void adamw_kernel(const __grid_constant__ AdamWArgs a, const AdamWScalars s) {
  const std::int64_t total = a.first_chunk[a.count];
  for (std::int64_t chunk = blockIdx.x; chunk < total; chunk += gridDim.x) {
    const int t = tensor_of(a.first_chunk, a.count, chunk);
    const std::int64_t begin = (chunk - a.first_chunk[t]) * kChunk;
    const std::int64_t end = begin + kChunk < a.n[t] ? begin + kChunk : a.n[t];
    float* p = a.params[t];
    const float* grad = a.grads[t];
    float* m = a.m[t];
    float* v = a.v[t];
    for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float g = grad[i];
      const float mi = s.b1 * m[i] + (1.0f - s.b1) * g;
      const float vi = s.b2 * v[i] + (1.0f - s.b2) * g * g;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * s.decay - s.step_size * mi / (sqrtf(vi) * s.inv_sqrt_bc2 + s.eps);
    }
  }
}

__global__ void sum_squares_kernel(const __grid_constant__ SumArgs a, double* partial) {
  __shared__ double scratch[32];
  const std::int64_t total = a.first_chunk[a.count];
  double acc = 0.0;
  for (std::int64_t chunk = blockIdx.x; chunk < total; chunk += gridDim.x) {
    const int t = tensor_of(a.first_chunk, a.count, chunk);
    const std::int64_t begin = (chunk - a.first_chunk[t]) * kChunk;
    const std::int64_t end = begin + kChunk < a.n[t] ? begin + kChunk : a.n[t];
    const float* x = a.x[t];
    for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double xi = x[i];
      acc += xi * xi;
    }
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block of 1024 threads: out[0] = the sum of the partials.
__global__ void sum_partials_kernel(const double* partial, std::int64_t count, double* out) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[0] = acc;
}

__global__ void scale_kernel(float* x, std::int64_t n, float s) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= s;
  }
}

unsigned chunk_blocks(std::int64_t chunks, std::int64_t cap) { return static_cast<unsigned>(std::min(chunks, cap)); }

}  // namespace

void adamw_step(const std::vector<AdamWTensor>& tensors, const AdamWConfig& cfg, std::int64_t step) {
  HERD_CHECK(step >= 1, "AdamW step counts from 1, got ", step);
  // As kernels/cpu/optim.cpp: the corrections in double, then rounded to fp32.
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
  AdamWScalars s;
  s.decay = static_cast<float>(1.0 - cfg.lr * cfg.weight_decay);
  s.step_size = static_cast<float>(cfg.lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.b1 = static_cast<float>(cfg.beta1);
  s.b2 = static_cast<float>(cfg.beta2);
  s.eps = static_cast<float>(cfg.eps);

  AdamWArgs a{};
  auto launch = [&] {
    const std::int64_t chunks = a.first_chunk[a.count];
    if (chunks > 0) {
      adamw_kernel<<<chunk_blocks(chunks, kMaxChunkBlocks), kThreads, 0, stream()>>>(a, s);
      HERD_CUDA_LAUNCHED("adamw_step");
    }
    a = AdamWArgs{};
  };
  for (const AdamWTensor& t : tensors) {
    if (t.n <= 0) continue;
    if (a.count == kMaxTensors) launch();
    const int c = a.count;
    a.params[c] = t.params;
    a.grads[c] = t.grads;
    a.m[c] = t.m;
    a.v[c] = t.v;
    a.n[c] = t.n;
    a.first_chunk[c + 1] = a.first_chunk[c] + chunks_of(t.n);
    a.count = c + 1;
  }
  launch();
}

double sum_squares(const std::vector<const float*>& tensors, const std::vector<std::int64_t>& sizes) {
  HERD_CHECK(tensors.size() == sizes.size(), "sum_squares: ", tensors.size(), " tensors but ", sizes.size(), " sizes");
  // The batches of up to kMaxTensors non-empty tensors, each with its grid.
  std::vector<SumArgs> batches;
  std::vector<std::int64_t> grids;
  SumArgs a{};
  auto close = [&] {
    if (a.count > 0) {
      batches.push_back(a);
      grids.push_back(std::min(a.first_chunk[a.count], kSumBlocks));
    }
    a = SumArgs{};
  };
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] <= 0) continue;
    if (a.count == kMaxTensors) close();
    const int c = a.count;
    a.x[c] = tensors[i];
    a.n[c] = sizes[i];
    a.first_chunk[c + 1] = a.first_chunk[c] + chunks_of(sizes[i]);
    a.count = c + 1;
  }
  close();
  if (batches.empty()) return 0.0;

  std::int64_t partials = 0;
  for (std::int64_t g : grids) partials += g;
  DeviceBuffer<double> partial(partials);
  DeviceBuffer<double> total(1);
  std::int64_t offset = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    sum_squares_kernel<<<static_cast<unsigned>(grids[b]), kThreads, 0, stream()>>>(batches[b], partial.data() + offset);
    HERD_CUDA_LAUNCHED("sum_squares");
    offset += grids[b];
  }
  sum_partials_kernel<<<1, 1024, 0, stream()>>>(partial.data(), partials, total.data());
  HERD_CUDA_LAUNCHED("sum_squares total");
  double result = 0.0;
  copy_to_host(&result, total.data(), sizeof result);
  return result;
}

void scale_buffer(float* x, std::int64_t n, float s) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(x, n, s);
  HERD_CUDA_LAUNCHED("scale_buffer");
}

}  // namespace herd::kernels::cuda
