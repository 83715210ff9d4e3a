// herd calibrate --device cuda: herd's own GPU kernels timed at a model's shapes (kernels/device.h,
// DeviceBackend::measure_rates) and written as a cluster file: a preset (h200 by default) whose
// accelerator's bf16 efficiencies are what herd's kernels reached on this GPU, so that `herd estimate
// --cluster FILE --software herd` plans a run of herd's kernels rather than of the libraries the preset
// describes. The GPU counterpart of the CPU calibration's kernel stage (train/plan/calibrate_kernels.h);
// docs/gpu.md has a run.
#pragma once
#include <string>

#include "herd/kernels/device.h"
#include "herd/model/config.h"
#include "herd/topology/cluster.h"

namespace herd::cli::calibration {

// The preset with its accelerator's bf16 efficiencies set from `r`, the rates measured at `sh` for model
// `m` (pure; tests/cli check it on hand-computed numbers):
//   bf16_matmul_efficiency   the step's GEMM FLOPs (L blocks' linears and the loss head, forward and
//                            both gradients) over their time, over the bf16 peak;
//   bf16_attention_fwd/bwd   the planner's causal attention FLOPs (4 B Hq D pairs; backward 2.5x) over
//                            the kernel's time, over the bf16 peak;
//   bf16_memory_bw           RMSNorm's bytes over its time, over the nominal HBM bandwidth;
//   optimizer_bw_efficiency  the multi-tensor AdamW pass and bf16 re-copy the same way (30 bytes a
//                            parameter): one long stream, about 3x the per-layer norms' rate on an H200;
//   kernel_overhead_us       one tiny launch in a stream of them.
// The peaks, memory, network and fp32 efficiencies stay the preset's; `name` says what was calibrated.
topology::Cluster device_cluster(const topology::Cluster& preset, const model::LlamaConfig& m,
                                 const kernels::DeviceRateShapes& sh, const kernels::DeviceRates& r);

struct DeviceCalibrateOptions {
  std::string model;
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 2048;
  std::string cluster = "h200";  // the preset (or cluster file) whose peaks and network are kept
  std::string out;               // required
  int repeats = 5;
};
int run_calibrate_device(const DeviceCalibrateOptions& o);

}  // namespace herd::cli::calibration
