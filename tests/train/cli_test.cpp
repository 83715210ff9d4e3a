// The commands around training: `herd train` errors are one line with exit status 1, and the samplers
// behave (greedy = argmax, top-p keeps the nucleus). `herd plot` is tested in tests/cli/plot_cli_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli_runner.h"
#include "herd/kernels/device.h"
#include "herd/train/generate.h"

namespace herd::train {
namespace {

using herd::testing::run_herd_combined;

TEST(TrainCli, ConfigErrorsAreOneLineWithStatus1) {
  auto r = run_herd_combined("train --optim.lrr=1");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out,
            "herd train: error: override: unknown key 'optim.lrr'; optim has lr, min_lr_ratio, beta1, "
            "beta2, eps, weight_decay, grad_clip\n");
  r = run_herd_combined("train --data.dir=/nonexistent/shards");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("/nonexistent/shards"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  r = run_herd_combined("train --print-config --train.steps=7");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("\"steps\": 7"), std::string::npos) << r.out;
}

// train.precision: fp32, bf16 or fp64, by override or flag; anything else is one line naming the field.
TEST(TrainCli, PrecisionIsFp32Bf16OrFp64) {
  for (const std::string args : {"--train.precision=fp16", "--precision bf8", "--precision BF16"}) {
    auto r = run_herd_combined("train " + args);
    EXPECT_EQ(r.status, 1) << args;
    const std::string value = args.substr(args.find_first_of("= ") + 1);
    EXPECT_EQ(r.out, "herd train: error: train.precision: expected fp32, bf16 or fp64, got '" + value + "'\n") << args;
  }
  for (const std::string p : {"fp32", "bf16", "fp64"}) {
    auto r = run_herd_combined("train --print-config --precision " + p);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("\"precision\": \"" + p + "\""), std::string::npos) << r.out;
  }
}

// train.device: cpu or cuda. cuda names what is missing on this build and machine (the CUDA toolkit at
// build time, a visible GPU) or what it cannot run (fp64) in one line, before anything is allocated; no
// run starts.
TEST(TrainCli, DeviceIsCpuOrCuda) {
  auto r = run_herd_combined("train --device tpu");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "herd train: error: train.device: expected cpu or cuda, got 'tpu'\n");
  r = run_herd_combined("train --print-config --device cuda");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"device\": \"cuda\""), std::string::npos) << r.out;
  r = run_herd_combined("train --train.device=cuda --train.precision=fp64 --train.steps=1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  const kernels::DeviceBackend* cuda = kernels::device_backend(kernels::Device::kCuda);
  std::string why;
  if (cuda == nullptr) {
    EXPECT_NE(r.out.find("needs a herd built with the CUDA toolkit"), std::string::npos) << r.out;
  } else if (cuda->device_count(&why) == 0) {
    EXPECT_NE(r.out.find("no GPU is visible"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("use train.device=cpu"), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find("train.precision: fp64 runs on the CPU only"), std::string::npos) << r.out;
  }
}

TEST(Sampling, GreedyTemperatureAndTopP) {
  const std::vector<float> logits = {0.0f, 3.0f, 2.9f, -1.0f};
  SampleOptions o;
  EXPECT_EQ(sample_token(logits.data(), 4, o, 0), 1);  // greedy
  o.temperature = 1.0;
  o.top_p = 0.01;  // the nucleus is the single most likely token
  for (std::uint64_t d = 0; d < 50; ++d) EXPECT_EQ(sample_token(logits.data(), 4, o, d), 1);
  o.top_p = 1.0;
  std::array<int, 4> counts{};
  for (std::uint64_t d = 0; d < 4000; ++d) ++counts[sample_token(logits.data(), 4, o, d)];
  // softmax(0, 3, 2.9, -1) = (0.026, 0.512, 0.463, 0.0094)
  EXPECT_NEAR(counts[1] / 4000.0, 0.512, 0.03);
  EXPECT_NEAR(counts[2] / 4000.0, 0.463, 0.03);
  EXPECT_GT(counts[0], 50);
}

}  // namespace
}  // namespace herd::train
