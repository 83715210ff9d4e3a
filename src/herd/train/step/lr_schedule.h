// Learning-rate and batch-shape schedules of the Llama 3 recipe (paper section 3.4.1), scaled.
//
// LR: linear warm-up from peak/warmup to the peak over `warmup` steps, then a cosine from the peak to
// `min_ratio x peak` over `decay` steps, and the floor after that (the paper: 8e-5, 8,000 warm-up
// steps, cosine to 8e-7 over 1.2M steps, i.e. a floor of 1%).
// Batch ramp: the paper starts with 4M-token batches of 4,096-token sequences, doubles both after
// 252M tokens (8M tokens of 8,192) and doubles the batch again after 2.87T tokens. Relative to the
// final shape that is a quarter of the batch tokens at half the length, then half at full length, then
// all of it: in sequences per micro-batch, B/2 of T/2, then B/2 of T, then B of T.
#pragma once

#include <cmath>
#include <cstdint>

namespace herd::train {

struct LrSchedule {
  double peak = 3e-3;
  double min_ratio = 0.01;
  std::int64_t warmup = 0;
  std::int64_t decay = 1;

  // The rate used by optimizer step `step` (0-based).
  double at(std::int64_t step) const {
    if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
    const double floor = peak * min_ratio;
    const std::int64_t s = step - warmup;
    if (decay <= 0 || s >= decay) return floor;
    const double progress = static_cast<double>(s) / static_cast<double>(decay);
    return floor + 0.5 * (peak - floor) * (1.0 + std::cos(3.14159265358979323846 * progress));
  }
};

struct BatchShape {
  std::int64_t micro_batch;  // sequences per micro-batch on one data-parallel rank
  std::int64_t seq_len;
};

struct BatchRamp {
  bool enabled = false;
  std::int64_t micro_batch = 8;  // final shape (per data-parallel rank)
  std::int64_t seq_len = 256;
  std::int64_t stage1_tokens = 0;  // tokens trained at (B/2, T/2)
  std::int64_t stage2_tokens = 0;  // tokens trained before the full batch (B/2, T)

  BatchShape at(std::int64_t tokens_seen) const {
    if (!enabled) return {micro_batch, seq_len};
    if (tokens_seen < stage1_tokens) return {micro_batch / 2, seq_len / 2};
    if (tokens_seen < stage2_tokens) return {micro_batch / 2, seq_len};
    return {micro_batch, seq_len};
  }
};

}  // namespace herd::train
