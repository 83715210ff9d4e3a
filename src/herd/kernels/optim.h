// AdamW on flat FP32 buffers and global-norm gradient clipping.
//
// AdamW follows PyTorch's torch.optim.AdamW (so the golden tests can match it step for step): with
// step t starting at 1,
//   p *= 1 - lr * wd                                  (decoupled weight decay)
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// Clipping is split so a sharded optimizer can all-reduce the partial sums in between:
// sum_squares per local buffer -> (all-reduce) -> clip_coefficient(sqrt(total), max_norm) -> adamw_step's
// grad_scale.
#pragma once

#include <cstdint>

#include "herd/core/bf16.h"

namespace herd::kernels {

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// params, grads, m, v: n elements each; m and v start at zero; step >= 1. The gradients are read times
// grad_scale (the clip coefficient; grads are left as they were), and where `rounded` is not null
// (T = float only) each new weight is also written rounded to bf16 into it (core/bf16.h's nearest-even:
// bf16 mode's compute copy, bit for bit to_bf16() after the step, without that pass).
template <typename T>
void adamw_step(T* params, const T* grads, T* m, T* v, std::int64_t n, const AdamWConfig& cfg, std::int64_t step,
                T grad_scale = T(1), bf16* rounded = nullptr);

// sum of x_i^2, accumulated in double.
template <typename T>
double sum_squares(const T* x, std::int64_t n);

// The factor clip_grad_norm_ applies: min(1, max_norm / (total_norm + 1e-6)).
double clip_coefficient(double total_norm, double max_norm);

}  // namespace herd::kernels
