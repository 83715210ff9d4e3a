// The commands around training: `herd train` errors are one line with exit status 1, and the samplers
// behave (greedy = argmax, top-p keeps the nucleus). `herd plot` is tested in tests/cli/plot_cli_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "herd/kernels/device.h"
#include "herd/train/generate.h"

namespace herd::train {
namespace {

struct CmdResult {
  int status;
  std::string output;  // stdout and stderr
};

CmdResult run_herd(const std::string& args) {
  const std::string cmd = std::string(HERD_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int st = pclose(p);
  return {WEXITSTATUS(st), out};
}

TEST(TrainCli, ConfigErrorsAreOneLineWithStatus1) {
  CmdResult r = run_herd("train --optim.lrr=1");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output,
            "herd train: error: override: unknown key 'optim.lrr'; optim has lr, min_lr_ratio, beta1, "
            "beta2, eps, weight_decay, grad_clip\n");
  r = run_herd("train --data.dir=/nonexistent/shards");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("/nonexistent/shards"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  r = run_herd("train --print-config --train.steps=7");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("\"steps\": 7"), std::string::npos) << r.output;
}

// train.precision: fp32, bf16 or fp64, by override or flag; anything else is one line naming the field.
TEST(TrainCli, PrecisionIsFp32Bf16OrFp64) {
  for (const std::string args : {"--train.precision=fp16", "--precision bf8", "--precision BF16"}) {
    CmdResult r = run_herd("train " + args);
    EXPECT_EQ(r.status, 1) << args;
    const std::string value = args.substr(args.find_first_of("= ") + 1);
    EXPECT_EQ(r.output, "herd train: error: train.precision: expected fp32, bf16 or fp64, got '" + value + "'\n")
        << args;
  }
  for (const std::string p : {"fp32", "bf16", "fp64"}) {
    CmdResult r = run_herd("train --print-config --precision " + p);
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("\"precision\": \"" + p + "\""), std::string::npos) << r.output;
  }
}

// train.device: cpu or cuda. cuda names what is missing on this build and machine (the CUDA toolkit at
// build time, a visible GPU) in one line, before anything is allocated; no run starts.
TEST(TrainCli, DeviceIsCpuOrCuda) {
  CmdResult r = run_herd("train --device tpu");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output, "herd train: error: train.device: expected cpu or cuda, got 'tpu'\n");
  r = run_herd("train --print-config --device cuda");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"device\": \"cuda\""), std::string::npos) << r.output;
  r = run_herd("train --train.device=cuda --train.steps=1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  const kernels::DeviceBackend* cuda = kernels::device_backend(kernels::Device::kCuda);
  std::string why;
  if (cuda == nullptr) {
    EXPECT_NE(r.output.find("needs a herd built with the CUDA toolkit"), std::string::npos) << r.output;
  } else if (cuda->device_count(&why) == 0) {
    EXPECT_NE(r.output.find("no GPU is visible"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("use train.device=cpu"), std::string::npos) << r.output;
  } else {
    EXPECT_NE(r.output.find("the training step does not yet"), std::string::npos) << r.output;
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
