// SwiGLU's gate: out = silu(gate) * up, silu(g) = g * sigmoid(g), elementwise over (n, width) rows.
//
// Row strides let the caller keep gate and up side by side in one (n, 2 * width) buffer (the output
// of one fused gate/up GEMM). Backward, with s = sigmoid(g):
//   dgate = dout * up * s * (1 + g * (1 - s)),   dup = dout * g * s.
// dgate and dup are overwritten (each is the sole gradient of a GEMM output).
#pragma once

#include <cstdint>

#include "herd/core/bf16.h"

namespace herd::kernels {

template <typename T>
void swiglu_forward(const T* gate, std::int64_t ldg, const T* up, std::int64_t ldu, std::int64_t n, std::int64_t width,
                    T* out, std::int64_t ldo);

template <typename T>
void swiglu_backward(const T* dout, std::int64_t lddo, const T* gate, std::int64_t ldg, const T* up, std::int64_t ldu,
                     std::int64_t n, std::int64_t width, T* dgate, std::int64_t lddg, T* dup, std::int64_t lddu);

// bf16 tensors (`train.precision = bf16`): the same fp32 arithmetic on widened gate and up, the results
// rounded to bf16 as they are written (the product is a saved tensor and a GEMM input, the gradients
// are GEMM inputs), so no fp32 copy of any of them is made.
void swiglu_forward(const bf16* gate, std::int64_t ldg, const bf16* up, std::int64_t ldu, std::int64_t n,
                    std::int64_t width, bf16* out, std::int64_t ldo);
void swiglu_backward(const float* dout, std::int64_t lddo, const bf16* gate, std::int64_t ldg, const bf16* up,
                     std::int64_t ldu, std::int64_t n, std::int64_t width, bf16* dgate, std::int64_t lddg, bf16* dup,
                     std::int64_t lddu);

}  // namespace herd::kernels
