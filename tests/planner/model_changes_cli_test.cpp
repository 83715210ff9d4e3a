// The planner's model knobs through `herd estimate`: bad values are one line naming the flag, every knob
// reaches the JSON, and --software defaults by the cluster (planner/model_changes_test.cpp has the costs).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "herd/core/json.h"

namespace herd::planner {
namespace {

// Bad values: one line naming the flag, the value and the accepted ones.
TEST(ModelChanges, BadFlagValuesAreNamed) {
  const std::string base = std::string(HERD_BINARY) +
                           " estimate --model llama3-8b --cluster dgx-h100 --gpus 8 --tp 8 --cp 1 --pp 1 --dp 1 "
                           "--seq-len 4096 --global-batch 8 ";
  const std::pair<const char*, const char*> cases[] = {
      {"--layer-split middle", "auto, even or light-ends"},
      {"--software jax", "fused, eager, compiled or herd"},
      {"--attention sparse", "flash or materialized"},
      {"--pipeline-sends maybe", "async or sync"},
      {"--dp-overlap yes", "on or off"},
      {"--grad-acc-fusion auto", "on or off"},
      {"--tp-overlap sometimes", "on or off"},
      {"--grad-dtype fp64", "fp32 or bf16"},
      {"--precision int4", "bf16, fp16, fp8 or fp32"},
      // fp64 is a precision herd trains (its reference), not one it plans.
      {"--precision fp64", "bf16, fp16, fp8 or fp32"}};
  for (const auto& [flag, accepted] : cases) {
    FILE* p = popen((base + flag + " 2>&1").c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
    const int rc = pclose(p);
    EXPECT_NE(WEXITSTATUS(rc), 0) << flag;
    const std::string name(flag, std::string(flag).find(' '));
    const std::string value = std::string(flag).substr(name.size() + 1);
    EXPECT_NE(out.find(name), std::string::npos) << out;
    EXPECT_NE(out.find("'" + value + "'"), std::string::npos) << out;
    EXPECT_NE(out.find(accepted), std::string::npos) << out;
    EXPECT_EQ(out.find('\n'), out.size() - 1) << out;  // one line
  }
  // Every knob reaches the JSON: layout keys and top-level precision.
  FILE* p = popen(
      (base + "--software eager --attention materialized --pipeline-sends sync --dp-overlap off "
              "--grad-acc-fusion on --tp-overlap on --grad-dtype bf16 --layer-split even --precision fp8 --json 2>&1")
          .c_str(),
      "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  ASSERT_EQ(WEXITSTATUS(pclose(p)), 0) << out;
  const Json j = Json::parse(out);
  EXPECT_EQ(j["layout"]["software"], "eager");
  EXPECT_EQ(j["layout"]["attention"], "materialized");
  EXPECT_EQ(j["layout"]["pipeline_sends"], "sync");
  EXPECT_EQ(j["layout"]["dp_overlap"], "off");
  EXPECT_EQ(j["layout"]["grad_acc_fusion"], "on");
  EXPECT_EQ(j["layout"]["tp_overlap"], "on");
  EXPECT_EQ(j["layout"]["grad_dtype"], "bf16");
  EXPECT_EQ(j["layout"]["layer_split"], "even");
  EXPECT_EQ(j["precision"], "fp8");

  // herd's own runtime has no TP overlap: planning it with one is refused in one line, with the fix,
  // whether the profile is given or is the CPU host's default; off is accepted.
  for (const std::string& cmd :
       {base + "--software herd --tp-overlap on", std::string(HERD_BINARY) +
                                                      " estimate --model tiny --cluster local-cpu --gpus 2 --tp 2 "
                                                      "--cp 1 --pp 1 --dp 1 --seq-len 256 --global-batch 4 "
                                                      "--sequence-parallel true --tp-overlap on"}) {
    FILE* q = popen((cmd + " 2>&1").c_str(), "r");
    std::string err;
    while (std::fgets(buf.data(), buf.size(), q)) err += buf.data();
    EXPECT_NE(WEXITSTATUS(pclose(q)), 0) << cmd;
    EXPECT_NE(err.find("--tp-overlap: 'on'"), std::string::npos) << err;
    EXPECT_NE(err.find("--software herd"), std::string::npos) << err;
    EXPECT_NE(err.find("use --tp-overlap off"), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
  }
  FILE* q = popen((base + "--software herd --tp-overlap off > /dev/null 2>&1").c_str(), "r");
  EXPECT_EQ(WEXITSTATUS(pclose(q)), 0);
}

// `--software` left out: herd on a CPU host (its cluster has host_cores; herd's runtime is the only
// software that runs there), fused on an accelerator cluster. On a CPU host the herd profile is what
// the default gives, and the fused one plans the same layout differently (a bf16 run of 4 micro-batches
// per rank: fused stacks add a gradient-accumulation pass and reduce-scatter gradients per
// micro-batch; herd's flat units keep full fp32 gradient buffers instead).
TEST(ModelChanges, SoftwareDefaultsToHerdOnACpuHostAndFusedElsewhere) {
  auto estimate_json = [](const std::string& args) {
    FILE* p = popen((std::string(HERD_BINARY) + " estimate " + args + " --json 2>&1").c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
    EXPECT_EQ(WEXITSTATUS(pclose(p)), 0) << out;
    return Json::parse(out);
  };
  const std::string cpu =
      "--model tiny --cluster local-cpu --gpus 2 --tp 1 --cp 1 --pp 1 --dp 2 --seq-len 512 --global-batch 8 "
      "--microbatch-size 1 --recompute none --precision bf16";
  const Json by_default = estimate_json(cpu), herd = estimate_json(cpu + " --software herd");
  const Json fused = estimate_json(cpu + " --software fused");
  EXPECT_EQ(by_default["layout"]["software"], "herd");
  EXPECT_EQ(fused["layout"]["software"], "fused");
  EXPECT_EQ(by_default["step_time_s"].get<double>(), herd["step_time_s"].get<double>());
  EXPECT_GT(fused["step_time_s"].get<double>(), herd["step_time_s"].get<double>());
  EXPECT_NE(fused["memory"]["total_bytes"].get<double>(), herd["memory"]["total_bytes"].get<double>());
  const Json gpu = estimate_json(
      "--model llama3-8b --cluster dgx-h100 --gpus 8 --tp 8 --cp 1 --pp 1 --dp 1 --seq-len 4096 --global-batch 8");
  EXPECT_EQ(gpu["layout"]["software"], "fused");
}

}  // namespace
}  // namespace herd::planner
