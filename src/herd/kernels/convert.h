// Whole-buffer conversions between fp32 and bf16 for `train.precision = bf16` (docs/precision.md).
//
// Every element goes through core/bf16.h's scalar rounding (nearest, ties to even, on the bit pattern),
// inlined into a vectorised loop, so a buffer converted here rounds exactly as a single value, a
// safetensors file or the PyTorch reference does. Not the AVX512-BF16 convert instruction: it treats
// subnormal inputs as zero, and one rounding rule everywhere is worth more than the few percent of a
// memory-bound pass it would save. Large buffers are split over the kernel threads.
#pragma once

#include <cstdint>

#include "herd/core/bf16.h"

namespace herd::kernels {

// out (n) = x rounded to bf16.
void to_bf16(const float* x, std::int64_t n, bf16* out);
// out (n) = x widened to fp32 (exact).
void to_float(const bf16* x, std::int64_t n, float* out);
// x (n) := x rounded to bf16 (still fp32 numbers), and out (n) = the same values as bf16 when not null:
// a tensor that later kernels read in fp32 and that is saved in bf16 carries one rounding, seen alike by
// the forward and the backward.
void round_to_bf16(float* x, std::int64_t n, bf16* out);

}  // namespace herd::kernels
