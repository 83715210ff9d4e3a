// The numeric precision of a training run, one type from the configuration to the kernels: what the
// planner plans (bf16, fp16, fp8, fp32) and what herd's runtime trains (fp32; bf16, Llama 3's mixed
// precision: bf16 weight copies, matmul inputs and saved activations, fp32 master weights, gradients
// and optimizer; fp64, the reference). The element type of a buffer stays DType and the template
// parameter of the model; this is the run's choice.
#pragma once

#include <optional>
#include <string>

namespace herd {

enum class Precision { kBF16, kFP16, kFP8, kFP32, kFP64 };

const char* precision_name(Precision p);                                // "bf16", "fp16", "fp8", "fp32", "fp64"
std::optional<Precision> precision_from_name(const std::string& name);  // the inverse; nullopt for any other

}  // namespace herd
