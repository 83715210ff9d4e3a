// The single-rank optimizer step the parity tests' reference run uses: global-norm gradient clipping,
// then AdamW, over one model's flat parameter and gradient buffers (kernels/optim.h does the arithmetic,
// PyTorch's formulas). The runtime's own step is the sharded one of parallel/ (FSDP units); this one
// runs the same kernels over the whole model, so a layout's run is compared with one rank's.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "herd/core/aligned.h"
#include "herd/kernels/optim.h"

namespace herd::train {

template <typename T>
class AdamW {
 public:
  explicit AdamW(std::int64_t n)
      : n_(n), m_(aligned_array<T>(static_cast<std::size_t>(n))), v_(aligned_array<T>(static_cast<std::size_t>(n))) {
    std::memset(m_.get(), 0, bytes());
    std::memset(v_.get(), 0, bytes());
  }

  // Clips grads to max_norm (0: no clipping) and applies one AdamW update at rate `lr`; returns the
  // gradient norm before clipping.
  double step(T* params, T* grads, const kernels::AdamWConfig& base, double lr, double max_norm) {
    const double norm = grad_norm(grads);
    apply(params, grads, base, lr, max_norm, norm);
    return norm;
  }
  // The two halves of step(): the gradient norm, then clipping by it and the update.
  double grad_norm(const T* grads) const { return std::sqrt(kernels::sum_squares<T>(grads, n_)); }
  void apply(T* params, T* grads, const kernels::AdamWConfig& base, double lr, double max_norm, double norm) {
    const double clip = max_norm > 0 ? kernels::clip_coefficient(norm, max_norm) : 1.0;
    kernels::AdamWConfig cfg = base;
    cfg.lr = lr;
    ++step_;
    kernels::adamw_step<T>(params, grads, m_.get(), v_.get(), n_, cfg, step_, static_cast<T>(clip));
  }

  std::int64_t size() const { return n_; }
  std::int64_t steps() const { return step_; }
  void set_steps(std::int64_t s) { step_ = s; }
  T* m() { return m_.get(); }
  T* v() { return v_.get(); }
  std::size_t bytes() const { return sizeof(T) * static_cast<std::size_t>(n_); }

 private:
  std::int64_t n_;
  AlignedPtr<T> m_, v_;
  std::int64_t step_ = 0;
};

}  // namespace herd::train
