// SwiGLU on the GPU (kernels/swiglu.h): out = silu(gate) * up and its backward, elementwise over
// (n, width) rows with row strides, the gate math in fp32 with the CPU kernel's expressions (expf,
// IEEE division; the CPU uses its own fast_exp (about 2 ulp), and either side may contract into FMAs, so
// results may differ in the last fp32 bits and bf16 results by one ulp). The bf16 variants widen gate
// and up in registers and round the results to nearest even as they are written.
//
// Launch: a 2-D grid, blockIdx.x over rows and blockIdx.y over 256-column tiles of a row (each a
// grid-stride loop past the grid limits), one element per thread.
#include <algorithm>
#include <type_traits>

#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/kernels.h"

namespace herd::kernels::cuda {
namespace {

constexpr int kThreads = 256;

dim3 rows_grid(std::int64_t n, std::int64_t width) {
  const std::int64_t x = std::min<std::int64_t>(n, 65535LL * 32);
  const std::int64_t y = std::min<std::int64_t>((width + kThreads - 1) / kThreads, 65535);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

// Loops i over the rows and j over the columns of this thread (the body handles element (i, j)).
#define HERD_FOR_ROWS_COLUMNS(n, width)                                                                  \
  for (std::int64_t i = blockIdx.x; i < (n); i += gridDim.x)                                             \
    for (std::int64_t j = blockIdx.y * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < (width); \
         j += static_cast<std::int64_t>(gridDim.y) * blockDim.x)

template <typename In, typename Out>
__global__ void swiglu_forward_kernel(const In* gate, std::int64_t ldg, const In* up, std::int64_t ldu, std::int64_t n,
                                      std::int64_t width, Out* out, std::int64_t ldo) {
  HERD_FOR_ROWS_COLUMNS(n, width) {
    const float g = widen(gate[i * ldg + j]);
    const float o = g / (1.0f + expf(-g)) * widen(up[i * ldu + j]);
    if constexpr (std::is_same_v<Out, float>) {
      out[i * ldo + j] = o;
    } else {
      out[i * ldo + j] = narrow_bf16(o);
    }
  }
}

template <typename In, typename Out>
__global__ void swiglu_backward_kernel(const float* dout, std::int64_t lddo, const In* gate, std::int64_t ldg,
                                       const In* up, std::int64_t ldu, std::int64_t n, std::int64_t width, Out* dgate,
                                       std::int64_t lddg, Out* dup, std::int64_t lddu) {
  HERD_FOR_ROWS_COLUMNS(n, width) {
    const float d = dout[i * lddo + j];
    const float g = widen(gate[i * ldg + j]);
    const float s = 1.0f / (1.0f + expf(-g));
    const float gs = g * s;
    const float dg = d * widen(up[i * ldu + j]) * (s + gs * (1.0f - s));
    const float du = d * gs;
    if constexpr (std::is_same_v<Out, float>) {
      dgate[i * lddg + j] = dg;
      dup[i * lddu + j] = du;
    } else {
      dgate[i * lddg + j] = narrow_bf16(dg);
      dup[i * lddu + j] = narrow_bf16(du);
    }
  }
}

#undef HERD_FOR_ROWS_COLUMNS

}  // namespace

void swiglu_forward(const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu, std::int64_t n,
                    std::int64_t width, float* out, std::int64_t ldo) {
  if (n <= 0 || width <= 0) return;
  swiglu_forward_kernel<<<rows_grid(n, width), kThreads, 0, stream()>>>(gate, ldg, up, ldu, n, width, out, ldo);
  HERD_CUDA_LAUNCHED("swiglu_forward");
}

void swiglu_backward(const float* dout, std::int64_t lddo, const float* gate, std::int64_t ldg, const float* up,
                     std::int64_t ldu, std::int64_t n, std::int64_t width, float* dgate, std::int64_t lddg, float* dup,
                     std::int64_t lddu) {
  if (n <= 0 || width <= 0) return;
  swiglu_backward_kernel<<<rows_grid(n, width), kThreads, 0, stream()>>>(dout, lddo, gate, ldg, up, ldu, n, width,
                                                                         dgate, lddg, dup, lddu);
  HERD_CUDA_LAUNCHED("swiglu_backward");
}

void swiglu_forward(const bf16* gate, std::int64_t ldg, const bf16* up, std::int64_t ldu, std::int64_t n,
                    std::int64_t width, bf16* out, std::int64_t ldo) {
  if (n <= 0 || width <= 0) return;
  swiglu_forward_kernel<<<rows_grid(n, width), kThreads, 0, stream()>>>(dev(gate), ldg, dev(up), ldu, n, width,
                                                                        dev(out), ldo);
  HERD_CUDA_LAUNCHED("swiglu_forward bf16");
}

void swiglu_backward(const float* dout, std::int64_t lddo, const bf16* gate, std::int64_t ldg, const bf16* up,
                     std::int64_t ldu, std::int64_t n, std::int64_t width, bf16* dgate, std::int64_t lddg, bf16* dup,
                     std::int64_t lddu) {
  if (n <= 0 || width <= 0) return;
  swiglu_backward_kernel<<<rows_grid(n, width), kThreads, 0, stream()>>>(dout, lddo, dev(gate), ldg, dev(up), ldu, n,
                                                                         width, dev(dgate), lddg, dev(dup), lddu);
  HERD_CUDA_LAUNCHED("swiglu_backward bf16");
}

}  // namespace herd::kernels::cuda
