#include "herd/core/precision.h"

namespace herd {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBF16: return "bf16";
    case Precision::kFP16: return "fp16";
    case Precision::kFP8: return "fp8";
    case Precision::kFP32: return "fp32";
    case Precision::kFP64: return "fp64";
  }
  return "?";
}

std::optional<Precision> precision_from_name(const std::string& name) {
  for (Precision p : {Precision::kBF16, Precision::kFP16, Precision::kFP8, Precision::kFP32, Precision::kFP64}) {
    if (name == precision_name(p)) return p;
  }
  return std::nullopt;
}

}  // namespace herd
