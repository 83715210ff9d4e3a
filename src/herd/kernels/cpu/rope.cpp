// RoPE: frequency table (with Llama 3.1 scaling) and the in-place rotation, forward and inverse.
#include "herd/kernels/rope.h"

#include <cmath>
#include <numbers>

#include "herd/core/check.h"
#include "herd/core/cpu_isa.h"
#include "herd/kernels/cpu/common.h"

namespace herd::kernels {

std::vector<double> rope_inv_freq(const RopeConfig& cfg) {
  HERD_CHECK(cfg.head_dim > 0 && cfg.head_dim % 2 == 0, "RoPE head_dim must be even, got ", cfg.head_dim);
  const std::int64_t half = cfg.head_dim / 2;
  std::vector<double> f(half);
  for (std::int64_t i = 0; i < half; ++i) {
    f[i] = std::pow(cfg.theta, -2.0 * static_cast<double>(i) / static_cast<double>(cfg.head_dim));
  }
  if (cfg.scaling_factor > 0) {
    const double old = static_cast<double>(cfg.original_max_pos);
    const double low_wavelen = old / cfg.low_freq_factor;
    const double high_wavelen = old / cfg.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2.0 * std::numbers::pi / x;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        x /= cfg.scaling_factor;
      } else {
        const double smooth = (old / wavelen - cfg.low_freq_factor) / (cfg.high_freq_factor - cfg.low_freq_factor);
        x = (1.0 - smooth) * x / cfg.scaling_factor + smooth * x;
      }
    }
  }
  return f;
}

template <typename T>
RopeTable<T>::RopeTable(const RopeConfig& cfg, std::int64_t max_pos) : cfg_(cfg), max_pos_(max_pos) {
  HERD_CHECK(max_pos > 0, "RoPE table needs max_pos > 0");
  const std::vector<double> f = rope_inv_freq(cfg);
  const std::int64_t half = cfg.head_dim / 2;
  cos_.resize(max_pos * half);
  sin_.resize(max_pos * half);
  for (std::int64_t p = 0; p < max_pos; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(p) * f[i];
      cos_[p * half + i] = static_cast<T>(std::cos(a));
      sin_[p * half + i] = static_cast<T>(std::sin(a));
    }
  }
}

namespace {

// sign = +1 rotates by +angle (forward), -1 by -angle (backward: the transpose). x and out may be the
// same buffer (in place); O = bf16 rounds each rotated value as it is stored (cpu::put).
template <typename T, typename O>
HERD_CPU_CLONES void rotate(const RopeTable<T>& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                            const T* x, std::int64_t ld, O* out, T sign) {
  const std::int64_t d = table.config().head_dim;
  const std::int64_t half = d / 2;
  const bool interleaved = table.config().layout == RopeLayout::kInterleaved;
#pragma omp parallel for schedule(static) if (n * heads * d > 32768)
  for (std::int64_t t = 0; t < n; ++t) {
    HERD_CHECK(pos[t] >= 0 && pos[t] < table.max_pos(), "RoPE position ", pos[t], " outside the table [0, ",
               table.max_pos(), ")");
    const T* c = table.cos_row(pos[t]);
    const T* s = table.sin_row(pos[t]);
    for (std::int64_t h = 0; h < heads; ++h) {
      const T* xh = x + t * ld + h * d;
      O* oh = out + t * ld + h * d;
      if (interleaved) {
#pragma omp simd
        for (std::int64_t i = 0; i < half; ++i) {
          const T a = xh[2 * i], b = xh[2 * i + 1];
          cpu::put(a * c[i] - sign * b * s[i], oh[2 * i]);
          cpu::put(sign * a * s[i] + b * c[i], oh[2 * i + 1]);
        }
      } else {
#pragma omp simd
        for (std::int64_t i = 0; i < half; ++i) {
          const T a = xh[i], b = xh[i + half];
          cpu::put(a * c[i] - sign * b * s[i], oh[i]);
          cpu::put(sign * a * s[i] + b * c[i], oh[i + half]);
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(const RopeTable<T>& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads, T* x,
                  std::int64_t ld) {
  rotate<T, T>(table, pos, n, heads, x, ld, x, T(1));
}

template <typename T>
void rope_backward(const RopeTable<T>& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads, T* dx,
                   std::int64_t ld) {
  rotate<T, T>(table, pos, n, heads, dx, ld, dx, T(-1));
}

void rope_forward(const RopeTable<float>& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                  const float* x, std::int64_t ld, bf16* out) {
  rotate<float, bf16>(table, pos, n, heads, x, ld, out, 1.0f);
}

void rope_backward(const RopeTable<float>& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                   const float* dx, std::int64_t ld, bf16* out) {
  rotate<float, bf16>(table, pos, n, heads, dx, ld, out, -1.0f);
}

template class RopeTable<float>;
template class RopeTable<double>;
template void rope_forward<float>(const RopeTable<float>&, const std::int32_t*, std::int64_t, std::int64_t, float*,
                                  std::int64_t);
template void rope_forward<double>(const RopeTable<double>&, const std::int32_t*, std::int64_t, std::int64_t, double*,
                                   std::int64_t);
template void rope_backward<float>(const RopeTable<float>&, const std::int32_t*, std::int64_t, std::int64_t, float*,
                                   std::int64_t);
template void rope_backward<double>(const RopeTable<double>&, const std::int32_t*, std::int64_t, std::int64_t, double*,
                                    std::int64_t);

}  // namespace herd::kernels
