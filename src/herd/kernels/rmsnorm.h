// RMSNorm: y = x / rms(x) * w, rms(x) = sqrt(mean(x^2) + eps), per row of width dim.
//
// Forward saves rstd = 1 / rms per row (n floats: the activation list of model/activations.h keeps
// them). Backward, with r = rstd and c = (1/dim) sum_j w_j dy_j x_j:
//   dx_j = r * (w_j dy_j - x_j r^2 c),   dw_j += sum_rows dy_j x_j r.
// dx is written or accumulated (kAdd lets a layer add the norm's gradient into the residual stream's
// gradient without a second pass); dw always accumulates (+=).
#pragma once

#include <cstdint>

#include "herd/core/bf16.h"

namespace herd::kernels {

enum class Accumulate { kOverwrite, kAdd };

// x, y (n, dim) with row strides ldx, ldy; w (dim); rstd (n) written.
template <typename T>
void rmsnorm_forward(const T* x, std::int64_t ldx, const T* w, std::int64_t n, std::int64_t dim, double eps, T* y,
                     std::int64_t ldy, T* rstd);

// dy (n, dim); x and rstd as saved by the forward; dx (n, dim) per `acc`; dw (dim) +=.
template <typename T>
void rmsnorm_backward(const T* dy, std::int64_t lddy, const T* x, std::int64_t ldx, const T* w, const T* rstd,
                      std::int64_t n, std::int64_t dim, T* dx, std::int64_t lddx, Accumulate acc, T* dw);

// bf16 mode, on the saved tensors: x read as bf16 (widened exactly), y rounded to bf16 as it is
// written; w, rstd, dy, dx and dw fp32. Bit for bit the fp32 kernels on widened x, and y rounded after.
void rmsnorm_forward(const bf16* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                     bf16* y, std::int64_t ldy, float* rstd);
void rmsnorm_backward(const float* dy, std::int64_t lddy, const bf16* x, std::int64_t ldx, const float* w,
                      const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx, Accumulate acc,
                      float* dw);

}  // namespace herd::kernels
