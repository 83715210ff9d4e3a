// SwiGLU's gate: out = silu(gate) * up, silu(g) = g * sigmoid(g), elementwise over (n, width) rows.
//
// Row strides let the caller keep gate and up side by side in one (n, 2 * width) buffer (the output
// of one fused gate/up GEMM). Backward, with s = sigmoid(g):
//   dgate = dout * up * s * (1 + g * (1 - s)),   dup = dout * g * s.
// dgate and dup are overwritten (each is the sole gradient of a GEMM output).
#pragma once

#include <cstdint>

namespace herd::kernels {

template <typename T>
void swiglu_forward(const T* gate, std::int64_t ldg, const T* up, std::int64_t ldu, std::int64_t n, std::int64_t width,
                    T* out, std::int64_t ldo);

template <typename T>
void swiglu_backward(const T* dout, std::int64_t lddo, const T* gate, std::int64_t ldg, const T* up, std::int64_t ldu,
                     std::int64_t n, std::int64_t width, T* dgate, std::int64_t lddg, T* dup, std::int64_t lddu);

}  // namespace herd::kernels
