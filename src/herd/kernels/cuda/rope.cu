// RoPE on the GPU (kernels/rope.h): the host RopeTable<float>'s cos/sin rows copied to the device
// once (DeviceRopeTable), then the in-place rotation of kernels/cpu/rope.cpp, forward (+angle) and
// backward (-angle, the transpose), for both pair layouts (kHalf: (i, i + D/2); kInterleaved:
// (2i, 2i + 1)), with the CPU kernel's expressions.
//
// Launch: one block per token (a grid-stride loop over tokens past the grid limit); the block's
// threads stride over the token's heads * D/2 rotation pairs, so consecutive threads touch
// consecutive pairs of a head. A position outside [0, max_pos) is a caller bug (the CPU kernel
// checks it); the kernel leaves that token unrotated rather than read outside the table.
#include <algorithm>

#include "herd/core/check.h"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda {
namespace {

constexpr std::int64_t kMaxTokenBlocks = 65535LL * 32;

__global__ void rope_kernel(const float* cos_table, const float* sin_table, std::int64_t max_pos,
                            const std::int32_t* pos, std::int64_t n, int heads, int half, bool interleaved, float* x,
                            std::int64_t ld, float sign) {
  const int pairs = heads * half;
  for (std::int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const std::int64_t p = pos[t];
    if (p < 0 || p >= max_pos) continue;
    const float* c = cos_table + p * half;
    const float* s = sin_table + p * half;
    float* xt = x + t * ld;
    for (int k = threadIdx.x; k < pairs; k += blockDim.x) {
      const int h = k / half, i = k - h * half;
      float* xh = xt + static_cast<std::int64_t>(h) * (2 * half);
      const std::int64_t i0 = interleaved ? 2 * i : i;
      const std::int64_t i1 = interleaved ? 2 * i + 1 : i + half;
      const float a = xh[i0], b = xh[i1];
      xh[i0] = a * c[i] - sign * b * s[i];
      xh[i1] = sign * a * s[i] + b * c[i];
    }
  }
}

void rotate(const DeviceRopeTable& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* x,
            std::int64_t ld, float sign) {
  if (n <= 0 || heads <= 0) return;
  const std::int64_t half = table.config().head_dim / 2;
  const std::int64_t pairs = heads * half;
  HERD_CHECK(pairs <= (1LL << 30), "RoPE: heads * head_dim / 2 = ", pairs, " is too large for one token block");
  int threads = 32;
  while (threads < 256 && threads < pairs) threads *= 2;
  const auto blocks = static_cast<unsigned>(std::min(n, kMaxTokenBlocks));
  rope_kernel<<<blocks, threads, 0, stream()>>>(table.cos(), table.sin(), table.max_pos(), pos, n,
                                                static_cast<int>(heads), static_cast<int>(half),
                                                table.config().layout == RopeLayout::kInterleaved, x, ld, sign);
  HERD_CUDA_LAUNCHED("rope");
}

}  // namespace

DeviceRopeTable::DeviceRopeTable(const RopeTable<float>& host) : cfg_(host.config()), max_pos_(host.max_pos()) {
  const std::int64_t half = cfg_.head_dim / 2;
  const std::size_t bytes = static_cast<std::size_t>(max_pos_ * half) * sizeof(float);
  cos_ = static_cast<float*>(device_alloc(bytes));
  try {
    sin_ = static_cast<float*>(device_alloc(bytes));
    copy_to_device(cos_, host.cos_row(0), bytes);
    copy_to_device(sin_, host.sin_row(0), bytes);
  } catch (...) {
    device_free(cos_);
    if (sin_) device_free(sin_);
    throw;
  }
}

DeviceRopeTable::~DeviceRopeTable() {
  device_free(cos_);
  device_free(sin_);
}

void rope_forward(const DeviceRopeTable& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* x,
                  std::int64_t ld) {
  rotate(table, pos, n, heads, x, ld, 1.0f);
}

void rope_backward(const DeviceRopeTable& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads, float* dx,
                   std::int64_t ld) {
  rotate(table, pos, n, heads, dx, ld, -1.0f);
}

}  // namespace herd::kernels::cuda
