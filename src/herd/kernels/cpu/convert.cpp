// fp32 <-> bf16 buffer conversions (kernels/convert.h): core/bf16.h's scalar rounding in a loop GCC
// vectorises per ISA clone (the NaN test becomes a blend), OpenMP over large buffers.
#include "herd/kernels/convert.h"

#include "herd/kernels/cpu/common.h"

namespace herd::kernels {

namespace {
// Below this many elements one thread converts (a team costs more than the pass).
constexpr std::int64_t kParallelMin = 1 << 16;
}  // namespace

HERD_CPU_CLONES void to_bf16(const float* x, std::int64_t n, bf16* out) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) out[i].bits = float_to_bf16(x[i]);
}

HERD_CPU_CLONES void to_float(const bf16* x, std::int64_t n, float* out) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(x[i].bits);
}

HERD_CPU_CLONES void round_to_bf16(float* x, std::int64_t n, bf16* out) {
  if (out == nullptr) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (std::int64_t i = 0; i < n; ++i) x[i] = herd::round_to_bf16(x[i]);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint16_t h = float_to_bf16(x[i]);
    out[i].bits = h;
    x[i] = bf16_to_float(h);
  }
}

}  // namespace herd::kernels
