#include "herd/core/dtype.h"

namespace herd {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF64: return "fp64";
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kFP8: return "fp8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

Result<DType> parse_dtype(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kFP8}) {
    if (name == dtype_name(t)) return t;
  }
  if (name == "float32") return DType::kF32;
  if (name == "float64" || name == "double") return DType::kF64;
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16") return DType::kF16;
  return make_error("unknown dtype '", name, "'; use one of fp32, fp64, bf16, fp16, fp8");
}

}  // namespace herd
