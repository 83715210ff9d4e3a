// Element types, shared by the planner (bytes per element) and the runtime (tensor storage).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "herd/core/error.h"

namespace herd {

enum class DType { kF32, kF64, kBF16, kF16, kFP8 };

constexpr std::size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kF64: return 8;
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kFP8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t);  // "fp32", "fp64", "bf16", "fp16", "fp8"
Result<DType> parse_dtype(std::string_view name);

}  // namespace herd
