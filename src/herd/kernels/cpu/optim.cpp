// AdamW and the pieces of global-norm clipping, on flat buffers (memory-bound, OpenMP + simd).
#include "herd/kernels/optim.h"

#include <algorithm>
#include <cmath>

#include "herd/core/check.h"
#include "herd/core/cpu_isa.h"

namespace herd::kernels {

template <typename T>
HERD_CPU_CLONES void adamw_step(T* params, const T* grads, T* m, T* v, std::int64_t n, const AdamWConfig& cfg,
                                std::int64_t step) {
  HERD_CHECK(step >= 1, "AdamW step counts from 1, got ", step);
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
  const T decay = static_cast<T>(1.0 - cfg.lr * cfg.weight_decay);
  const T step_size = static_cast<T>(cfg.lr / bc1);
  const T inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
  const T b1 = static_cast<T>(cfg.beta1), b2 = static_cast<T>(cfg.beta2);
  const T eps = static_cast<T>(cfg.eps);
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = grads[i];
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] = params[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

template <typename T>
HERD_CPU_CLONES double sum_squares(const T* x, std::int64_t n) {
  double s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

template <typename T>
HERD_CPU_CLONES void scale_buffer(T* x, std::int64_t n, T s) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) x[i] *= s;
}

double clip_coefficient(double total_norm, double max_norm) { return std::min(1.0, max_norm / (total_norm + 1e-6)); }

template void adamw_step<float>(float*, const float*, float*, float*, std::int64_t, const AdamWConfig&, std::int64_t);
template void adamw_step<double>(double*, const double*, double*, double*, std::int64_t, const AdamWConfig&,
                                 std::int64_t);
template double sum_squares<float>(const float*, std::int64_t);
template double sum_squares<double>(const double*, std::int64_t);
template void scale_buffer<float>(float*, std::int64_t, float);
template void scale_buffer<double>(double*, std::int64_t, double);

}  // namespace herd::kernels
