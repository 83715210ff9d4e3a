// What every kernels/cuda/*.cu file shares: the error check, bf16 conversions in registers, launch
// geometry, and block-wide reductions. Device code only; not included outside kernels/cuda/.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "herd/core/bf16.h"
#include "herd/kernels/cuda/runtime.h"

namespace herd::kernels::cuda {

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t err, const char* file, int line);
[[noreturn]] void throw_cuda_error_message(const char* call, const std::string& message, const char* file, int line);

#define HERD_CUDA(call)                                                                   \
  do {                                                                                    \
    const cudaError_t herd_cuda_err_ = (call);                                            \
    if (herd_cuda_err_ != cudaSuccess) [[unlikely]] {                                     \
      ::herd::kernels::cuda::throw_cuda_error(#call, herd_cuda_err_, __FILE__, __LINE__); \
    }                                                                                     \
  } while (0)

// A precondition of a kernels/cuda entry point (a caller's bug): throws CudaError with the message.
#define HERD_CHECK_CUDA_ARG(cond, message)                                                 \
  do {                                                                                     \
    if (!(cond)) [[unlikely]] {                                                            \
      ::herd::kernels::cuda::throw_cuda_error_message(#cond, message, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

// After a kernel launch: a bad launch configuration shows here, not at the next synchronisation.
#define HERD_CUDA_LAUNCHED(name) HERD_CUDA(cudaPeekAtLastError())

inline cudaStream_t stream() { return static_cast<cudaStream_t>(compute_stream()); }

// herd::bf16 and __nv_bfloat16 share the bit layout (the top half of an fp32).
inline const __nv_bfloat16* dev(const bf16* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
inline __nv_bfloat16* dev(bf16* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
// Round to nearest even, as herd::float_to_bf16 (NaN stays NaN, overflow goes to infinity).
__device__ __forceinline__ __nv_bfloat16 narrow_bf16(float x) { return __float2bfloat16_rn(x); }

inline unsigned grid_for(std::int64_t n, int threads, std::int64_t max_blocks = 65535LL * 32) {
  std::int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values of shared memory.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(m);
}

}  // namespace herd::kernels::cuda
