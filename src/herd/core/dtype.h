// Element types, shared by the planner (bytes per element), the runtime (storage) and the
// communicators (raw buffers: void* + count + DType). The floats are storage and compute types; the two
// integers are for what collectives also move (token counts for the loss, indices). Only fp32, fp64,
// i32 and i64 are reduced by comm/ (comm::is_reducible).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "herd/core/bf16.h"
#include "herd/core/error.h"

namespace herd {

enum class DType { kF32, kF64, kBF16, kF16, kFP8, kI32, kI64 };

constexpr std::size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kF64: return 8;
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kFP8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

// The DType of a C++ element type.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::kBF16;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::kI64;
}

const char* dtype_name(DType t);  // "fp32", "fp64", "bf16", "fp16", "fp8", "i32", "i64"
// The floating types only (model and compute dtypes in configs and flags).
Result<DType> parse_dtype(std::string_view name);

}  // namespace herd
