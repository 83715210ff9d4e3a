// herd calibrate --device cuda: the efficiencies it writes, from hand-computed rates, and its input
// errors. The measurement itself runs on a GPU only (scripts/device_check.sh).
#include <gtest/gtest.h>

#include "cli/cli_runner.h"
#include "herd/cli/calibrate_device.h"

namespace herd::cli::calibration {
namespace {

using herd::testing::run_herd;

TEST(CalibrateDevice, EfficienciesFromHandComputedRates) {
  topology::Cluster preset = *topology::cluster_preset("h200");
  preset.accelerator.peak_tflops_bf16 = 1.0;     // 1e12 FLOP/s
  preset.accelerator.memory_bw_gb_per_s = 1000;  // 1e12 B/s
  model::LlamaConfig m = *model::resolve_model("tiny");
  m.n_layers = 2;
  kernels::DeviceRateShapes sh;
  sh.rows = 8;  // two sequences of 4
  sh.seq_len = 4;
  sh.heads = 2;
  sh.head_dim = 4;
  kernels::DeviceRates r;
  r.block_gemm_flops = 1e9;  // per block: two blocks in 4 ms, the head 0.4e9 in 1 ms
  r.block_gemm_s = 2e-3;
  r.head_gemm_flops = 4e8;
  r.head_gemm_s = 1e-3;
  // Causal pairs of 4 tokens: 10; forward FLOPs 4 x 2 sequences x 2 heads x 4 x 10 = 640.
  r.attention_fwd_s = 640 / 0.25e12;       // 25% of peak
  r.attention_bwd_s = 2.5 * 640 / 0.1e12;  // 10%
  r.stream_bytes = 5e8;
  r.stream_s = 1e-3;  // 5e11 B/s: half the HBM
  r.launch_s = 3e-6;
  r.optimizer_bytes = 3e9;
  r.optimizer_s = 4e-3;  // 7.5e11 B/s
  const topology::Cluster c = device_cluster(preset, m, sh, r);
  const topology::Accelerator& a = c.accelerator;
  EXPECT_NEAR(a.bf16_matmul_efficiency, 2.4e9 / 5e-3 / 1e12, 1e-12);  // (2 x 1e9 + 4e8) / (2 x 2 + 1) ms
  EXPECT_NEAR(a.bf16_attention_fwd_efficiency, 0.25, 1e-12);
  EXPECT_NEAR(a.bf16_attention_bwd_efficiency, 0.10, 1e-12);
  EXPECT_NEAR(a.bf16_memory_bw_efficiency, 0.5, 1e-12);
  EXPECT_NEAR(a.kernel_overhead_us, 3.0, 1e-9);
  EXPECT_NEAR(a.optimizer_bw_efficiency, 0.75, 1e-12);
  // What was not measured stays the preset's; a bf16 plan sees the calibrated values.
  EXPECT_EQ(a.matmul_efficiency, preset.accelerator.matmul_efficiency);
  EXPECT_EQ(a.memory_gib, preset.accelerator.memory_gib);
  EXPECT_EQ(c.tiers.size(), preset.tiers.size());
  EXPECT_NEAR(topology::at_precision(a, true).attention_bwd_efficiency, 0.10, 1e-12);
  EXPECT_NE(c.name.find("calibrated"), std::string::npos);
}

TEST(CalibrateDevice, InputErrorsAreOneLineNamingTheOption) {
  const std::pair<std::string, std::string> cases[] = {
      {"calibrate --device cuda --model tiny", "--out: a GPU calibration needs a file to write"},
      {"calibrate --device cuda --model tiny --out x.json --cluster local-cpu", "--cluster: 'local-cpu' does not"},
      {"calibrate --device cuda --model tiny --out x.json --cluster no-such", "--cluster"},
      {"calibrate --cluster h200", "--cluster: only with --device cuda"},
      {"calibrate --device tpu", "--device"},
  };
  for (const auto& [args, want] : cases) {
    const herd::testing::CliResult r = run_herd(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": one line\n" << r.err;
  }
  // On a machine without a GPU (or a build without CUDA) the device check says so, naming the option.
  const herd::testing::CliResult r = run_herd("calibrate --device cuda --model tiny --out x.json");
  if (r.status != 0) {
    EXPECT_NE(r.err.find("--device: 'cuda'"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace herd::cli::calibration
