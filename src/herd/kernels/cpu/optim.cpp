// AdamW and the pieces of global-norm clipping, on flat buffers (memory-bound, OpenMP + simd).
#include "herd/kernels/optim.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "herd/core/check.h"
#include "herd/core/cpu_isa.h"

namespace herd::kernels {

namespace {

// One AdamW update of element i (optim.h's formula), on the gradient times grad_scale.
template <typename T>
struct AdamWUpdate {
  T decay, step_size, inv_sqrt_bc2, b1, b2, eps, grad_scale;
  AdamWUpdate(const AdamWConfig& cfg, std::int64_t step, T scale) {
    HERD_CHECK(step >= 1, "AdamW step counts from 1, got ", step);
    const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
    decay = static_cast<T>(1.0 - cfg.lr * cfg.weight_decay);
    step_size = static_cast<T>(cfg.lr / bc1);
    inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
    b1 = static_cast<T>(cfg.beta1);
    b2 = static_cast<T>(cfg.beta2);
    eps = static_cast<T>(cfg.eps);
    grad_scale = scale;
  }
  T operator()(T& p, T g, T& m, T& v) const {
    g *= grad_scale;
    const T mi = b1 * m + (T(1) - b1) * g;
    const T vi = b2 * v + (T(1) - b2) * g * g;
    m = mi;
    v = vi;
    p = p * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    return p;
  }
};

template <typename T>
HERD_CPU_CLONES void adamw_loop(T* params, const T* grads, T* m, T* v, std::int64_t n, const AdamWUpdate<T>& u) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) u(params[i], grads[i], m[i], v[i]);
}

HERD_CPU_CLONES void adamw_loop(float* params, const float* grads, float* m, float* v, std::int64_t n,
                                const AdamWUpdate<float>& u, bf16* rounded) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) rounded[i].bits = float_to_bf16(u(params[i], grads[i], m[i], v[i]));
}

}  // namespace

template <typename T>
void adamw_step(T* params, const T* grads, T* m, T* v, std::int64_t n, const AdamWConfig& cfg, std::int64_t step,
                T grad_scale, bf16* rounded) {
  const AdamWUpdate<T> u(cfg, step, grad_scale);
  if (rounded == nullptr) {
    adamw_loop(params, grads, m, v, n, u);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    adamw_loop(params, grads, m, v, n, u, rounded);
  } else {
    HERD_CHECK(false, "AdamW: a bf16 copy is of fp32 weights");
  }
}

template <typename T>
HERD_CPU_CLONES double sum_squares(const T* x, std::int64_t n) {
  double s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

double clip_coefficient(double total_norm, double max_norm) { return std::min(1.0, max_norm / (total_norm + 1e-6)); }

template void adamw_step<float>(float*, const float*, float*, float*, std::int64_t, const AdamWConfig&, std::int64_t,
                                float, bf16*);
template void adamw_step<double>(double*, const double*, double*, double*, std::int64_t, const AdamWConfig&,
                                 std::int64_t, double, bf16*);
template double sum_squares<float>(const float*, std::int64_t);
template double sum_squares<double>(const double*, std::int64_t);

}  // namespace herd::kernels
