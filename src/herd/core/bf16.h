// bfloat16: the storage type of `train.precision = bf16` (weight copies, saved activations, matmul
// inputs) and of bf16 safetensors files, with the one pair of scalar converters both use.
//
// A bf16 value is the top 16 bits of an fp32 one: sign, the same 8-bit exponent, 7 stored mantissa
// bits (8 bits of precision with the implicit one, unit roundoff u = 2^-8). Widening is exact (append
// 16 zero bits); narrowing rounds to nearest, ties to even, on the bit pattern: add 0x7fff plus the
// lowest kept bit, then truncate. That rounds subnormals the same way (no flush to zero), carries into
// the exponent where it must and turns values past the largest finite bf16 into infinity; a NaN stays a
// (quiet) NaN instead of rounding into infinity. kernels/convert.h applies the same function to whole
// buffers, so a weight copy, a saved activation and a checkpoint value round alike.
#pragma once

#include <cstdint>
#include <cstring>

namespace herd {

// A bf16 value by its bit pattern: a distinct type so a bf16 buffer is never taken for int16 data.
struct bf16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2, "bf16 is two bytes");

inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // a quiet NaN
  }
  const std::uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;  // round to nearest, ties to even
  return static_cast<std::uint16_t>(bits >> 16);
}

inline float to_float(bf16 h) { return bf16_to_float(h.bits); }
inline bf16 to_bf16(float f) { return bf16{float_to_bf16(f)}; }
// f rounded to the nearest bf16 value, as an fp32 number.
inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace herd
