// Row-wise and element-wise kernels: embedding, RMSNorm, SwiGLU. Memory-bound; OpenMP over rows,
// `omp simd` for the vectorised inner loops and reductions.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "herd/core/check.h"
#include "herd/kernels/cpu/common.h"
#include "herd/kernels/embedding.h"
#include "herd/kernels/rmsnorm.h"
#include "herd/kernels/swiglu.h"

namespace herd::kernels {

template <typename T>
HERD_CPU_CLONES void embedding_forward(const std::int32_t* ids, std::int64_t n, const T* table,
                                       std::int64_t vocab_begin, std::int64_t rows, std::int64_t dim, T* out) {
#pragma omp parallel for schedule(static) if (n * dim > 32768)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = static_cast<std::int64_t>(ids[i]) - vocab_begin;
    T* o = out + i * dim;
    if (r >= 0 && r < rows) {
      std::copy(table + r * dim, table + (r + 1) * dim, o);
    } else {
      std::fill(o, o + dim, T(0));
    }
  }
}

HERD_CPU_CLONES void embedding_forward(const std::int32_t* ids, std::int64_t n, const bf16* table,
                                       std::int64_t vocab_begin, std::int64_t rows, std::int64_t dim, float* out) {
#pragma omp parallel for schedule(static) if (n * dim > 32768)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = static_cast<std::int64_t>(ids[i]) - vocab_begin;
    float* o = out + i * dim;
    if (r >= 0 && r < rows) {
      const bf16* t = table + r * dim;
#pragma omp simd
      for (std::int64_t j = 0; j < dim; ++j) o[j] = to_float(t[j]);
    } else {
      std::fill(o, o + dim, 0.0f);
    }
  }
}

template <typename T>
HERD_CPU_CLONES void embedding_backward(const std::int32_t* ids, std::int64_t n, const T* dout,
                                        std::int64_t vocab_begin, std::int64_t rows, std::int64_t dim, T* dtable) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = static_cast<std::int64_t>(ids[i]) - vocab_begin;
    if (r < 0 || r >= rows) continue;
    T* d = dtable + r * dim;
    const T* g = dout + i * dim;
#pragma omp simd
    for (std::int64_t j = 0; j < dim; ++j) d[j] += g[j];
  }
}

namespace {

// RMSNorm over x stored as In (T, or bf16 widened as read), y stored as Out (T, or rounded as written):
// the T kernel on widened x followed by rounding y, operation for operation.
template <typename T, typename In, typename Out>
HERD_CPU_CLONES void rmsnorm_forward_as(const In* x, std::int64_t ldx, const T* w, std::int64_t n, std::int64_t dim,
                                        double eps, Out* y, std::int64_t ldy, T* rstd) {
#pragma omp parallel for schedule(static) if (n * dim > 32768)
  for (std::int64_t i = 0; i < n; ++i) {
    const In* xi = x + i * ldx;
    const T ss = cpu::lane_sum<T>(dim, [&](std::int64_t j) { return cpu::widen(xi[j]) * cpu::widen(xi[j]); });
    const T r = static_cast<T>(1.0 / std::sqrt(static_cast<double>(ss) / static_cast<double>(dim) + eps));
    rstd[i] = r;
    Out* yi = y + i * ldy;
#pragma omp simd
    for (std::int64_t j = 0; j < dim; ++j) cpu::put(cpu::widen(xi[j]) * r * w[j], yi[j]);
  }
}

template <typename T, typename In>
HERD_CPU_CLONES void rmsnorm_backward_as(const T* dy, std::int64_t lddy, const In* x, std::int64_t ldx, const T* w,
                                         const T* rstd, std::int64_t n, std::int64_t dim, T* dx, std::int64_t lddx,
                                         Accumulate acc, T* dw) {
  // dw is a sum over rows: each thread sums its contiguous row range into its own slice of `partial`
  // (owned by the calling thread), then the slices are added in thread order (deterministic).
  const int nth = (n * dim > 32768) ? std::max(1, omp_get_max_threads()) : 1;
  T* partial = cpu::thread_scratch<T>(static_cast<std::size_t>(nth) * dim);
  std::fill(partial, partial + nth * dim, T(0));
  const T inv_dim = T(1) / static_cast<T>(dim);
#pragma omp parallel num_threads(nth)
  {
    const int t = omp_get_thread_num();
    std::int64_t begin, end;
    cpu::partition(n, omp_get_num_threads(), t, &begin, &end);
    T* pw = partial + t * dim;
    for (std::int64_t i = begin; i < end; ++i) {
      const T* dyi = dy + i * lddy;
      const In* xi = x + i * ldx;
      T* dxi = dx + i * lddx;
      const T r = rstd[i];
      const T c =
          cpu::lane_sum<T>(dim, [&](std::int64_t j) { return w[j] * dyi[j] * cpu::widen(xi[j]); }) * (inv_dim * r * r);
      if (acc == Accumulate::kAdd) {
#pragma omp simd
        for (std::int64_t j = 0; j < dim; ++j) dxi[j] += r * (w[j] * dyi[j] - cpu::widen(xi[j]) * c);
      } else {
#pragma omp simd
        for (std::int64_t j = 0; j < dim; ++j) dxi[j] = r * (w[j] * dyi[j] - cpu::widen(xi[j]) * c);
      }
#pragma omp simd
      for (std::int64_t j = 0; j < dim; ++j) pw[j] += dyi[j] * cpu::widen(xi[j]) * r;
    }
  }
  for (int t = 0; t < nth; ++t) {
    const T* pw = partial + t * dim;
#pragma omp simd
    for (std::int64_t j = 0; j < dim; ++j) dw[j] += pw[j];
  }
}

}  // namespace

template <typename T>
void rmsnorm_forward(const T* x, std::int64_t ldx, const T* w, std::int64_t n, std::int64_t dim, double eps, T* y,
                     std::int64_t ldy, T* rstd) {
  rmsnorm_forward_as<T, T, T>(x, ldx, w, n, dim, eps, y, ldy, rstd);
}

void rmsnorm_forward(const bf16* x, std::int64_t ldx, const float* w, std::int64_t n, std::int64_t dim, double eps,
                     bf16* y, std::int64_t ldy, float* rstd) {
  rmsnorm_forward_as<float, bf16, bf16>(x, ldx, w, n, dim, eps, y, ldy, rstd);
}

template <typename T>
void rmsnorm_backward(const T* dy, std::int64_t lddy, const T* x, std::int64_t ldx, const T* w, const T* rstd,
                      std::int64_t n, std::int64_t dim, T* dx, std::int64_t lddx, Accumulate acc, T* dw) {
  rmsnorm_backward_as<T, T>(dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc, dw);
}

void rmsnorm_backward(const float* dy, std::int64_t lddy, const bf16* x, std::int64_t ldx, const float* w,
                      const float* rstd, std::int64_t n, std::int64_t dim, float* dx, std::int64_t lddx, Accumulate acc,
                      float* dw) {
  rmsnorm_backward_as<float, bf16>(dy, lddy, x, ldx, w, rstd, n, dim, dx, lddx, acc, dw);
}

namespace {

// SwiGLU over gate and up stored as In (T, or bf16 widened as read), the outputs stored as Out (T, or
// rounded as written); dout is always T.
template <typename T, typename In, typename Out>
HERD_CPU_CLONES void swiglu_forward_as(const In* gate, std::int64_t ldg, const In* up, std::int64_t ldu, std::int64_t n,
                                       std::int64_t width, Out* out, std::int64_t ldo) {
#pragma omp parallel for schedule(static) if (n * width > 32768)
  for (std::int64_t i = 0; i < n; ++i) {
    const In* g = gate + i * ldg;
    const In* u = up + i * ldu;
    Out* o = out + i * ldo;
#pragma omp simd
    for (std::int64_t j = 0; j < width; ++j) {
      const T gj = cpu::widen(g[j]);
      cpu::put(gj / (T(1) + cpu::fast_exp(-gj)) * cpu::widen(u[j]), o[j]);
    }
  }
}

template <typename T, typename In, typename Out>
HERD_CPU_CLONES void swiglu_backward_as(const T* dout, std::int64_t lddo, const In* gate, std::int64_t ldg,
                                        const In* up, std::int64_t ldu, std::int64_t n, std::int64_t width, Out* dgate,
                                        std::int64_t lddg, Out* dup, std::int64_t lddu) {
#pragma omp parallel for schedule(static) if (n * width > 32768)
  for (std::int64_t i = 0; i < n; ++i) {
    const T* d = dout + i * lddo;
    const In* g = gate + i * ldg;
    const In* u = up + i * ldu;
    Out* dg = dgate + i * lddg;
    Out* du = dup + i * lddu;
#pragma omp simd
    for (std::int64_t j = 0; j < width; ++j) {
      const T gj = cpu::widen(g[j]);
      const T s = T(1) / (T(1) + cpu::fast_exp(-gj));
      const T gs = gj * s;
      cpu::put(d[j] * cpu::widen(u[j]) * (s + gs * (T(1) - s)), dg[j]);
      cpu::put(d[j] * gs, du[j]);
    }
  }
}

}  // namespace

template <typename T>
void swiglu_forward(const T* gate, std::int64_t ldg, const T* up, std::int64_t ldu, std::int64_t n, std::int64_t width,
                    T* out, std::int64_t ldo) {
  swiglu_forward_as<T, T, T>(gate, ldg, up, ldu, n, width, out, ldo);
}

template <typename T>
void swiglu_backward(const T* dout, std::int64_t lddo, const T* gate, std::int64_t ldg, const T* up, std::int64_t ldu,
                     std::int64_t n, std::int64_t width, T* dgate, std::int64_t lddg, T* dup, std::int64_t lddu) {
  swiglu_backward_as<T, T, T>(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
}

void swiglu_forward(const bf16* gate, std::int64_t ldg, const bf16* up, std::int64_t ldu, std::int64_t n,
                    std::int64_t width, bf16* out, std::int64_t ldo) {
  swiglu_forward_as<float, bf16, bf16>(gate, ldg, up, ldu, n, width, out, ldo);
}

void swiglu_backward(const float* dout, std::int64_t lddo, const bf16* gate, std::int64_t ldg, const bf16* up,
                     std::int64_t ldu, std::int64_t n, std::int64_t width, bf16* dgate, std::int64_t lddg, bf16* dup,
                     std::int64_t lddu) {
  swiglu_backward_as<float, bf16, bf16>(dout, lddo, gate, ldg, up, ldu, n, width, dgate, lddg, dup, lddu);
}

#define HERD_INSTANTIATE(T)                                                                                           \
  template void embedding_forward<T>(const std::int32_t*, std::int64_t, const T*, std::int64_t, std::int64_t,         \
                                     std::int64_t, T*);                                                               \
  template void embedding_backward<T>(const std::int32_t*, std::int64_t, const T*, std::int64_t, std::int64_t,        \
                                      std::int64_t, T*);                                                              \
  template void rmsnorm_forward<T>(const T*, std::int64_t, const T*, std::int64_t, std::int64_t, double, T*,          \
                                   std::int64_t, T*);                                                                 \
  template void rmsnorm_backward<T>(const T*, std::int64_t, const T*, std::int64_t, const T*, const T*, std::int64_t, \
                                    std::int64_t, T*, std::int64_t, Accumulate, T*);                                  \
  template void swiglu_forward<T>(const T*, std::int64_t, const T*, std::int64_t, std::int64_t, std::int64_t, T*,     \
                                  std::int64_t);                                                                      \
  template void swiglu_backward<T>(const T*, std::int64_t, const T*, std::int64_t, const T*, std::int64_t,            \
                                   std::int64_t, std::int64_t, T*, std::int64_t, T*, std::int64_t);
HERD_INSTANTIATE(float)
HERD_INSTANTIATE(double)
#undef HERD_INSTANTIATE

}  // namespace herd::kernels
