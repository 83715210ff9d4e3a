// `herd estimate` and `herd plan` as other tools call them: JSON field names, exit codes and one-line
// errors that name the field or constraint.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "herd/core/json.h"

namespace {

struct CmdOut {
  int status;
  std::string out;
};

CmdOut run(const std::string& args) {
  const std::string cmd = std::string(HERD_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int rc = pclose(p);
  return {WEXITSTATUS(rc), out};
}

const std::string kMeta =
    "--model llama3-405b --cluster llama3-h100 --gpus 16384 --tp 8 --cp 1 --pp 16 --dp 128 --v 8 "
    "--recompute selective --seq-len 8192 --global-batch 2048";

TEST(Cli, EstimateJsonHasTheContractFields) {
  CmdOut r = run("estimate " + kMeta + " --json");
  ASSERT_EQ(r.status, 0) << r.out;
  herd::Json j = herd::Json::parse(r.out);
  for (const char* k : {"fits", "mfu", "tflops_per_gpu", "tokens_per_s", "step_time_s", "memory", "time", "layout"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_TRUE(j["memory"].contains("total_bytes"));
  for (const char* k : {"parameters", "gradients", "optimizer_state", "activations", "embedding_output",
                        "fsdp_gathered", "comm_buffers", "transient", "fragmentation"}) {
    EXPECT_TRUE(j["memory"].contains(k)) << k;
  }
  for (const char* k : {"compute_s", "bubble_s", "exposed_comm_s"}) EXPECT_TRUE(j["time"].contains(k)) << k;
  for (const char* k : {"tp", "cp", "pp", "dp"}) EXPECT_TRUE(j["time"]["exposed_comm_s"].contains(k)) << k;
  for (const char* k : {"tp", "cp", "pp", "dp", "v", "microbatch_size", "n_microbatches", "recompute"}) {
    EXPECT_TRUE(j["layout"].contains(k)) << k;
  }
  EXPECT_EQ(j["layout"]["n_microbatches"], 16);
  EXPECT_TRUE(j["fits"].get<bool>());
}

TEST(Cli, EstimateTextAndReports) {
  const std::string svg = std::string(::testing::TempDir()) + "/herd_estimate.svg";
  const std::string html = std::string(::testing::TempDir()) + "/herd_estimate.html";
  CmdOut r = run("estimate " + kMeta + " --svg " + svg + " --html " + html);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("FLOP convention"), std::string::npos);
  EXPECT_NE(r.out.find("MFU"), std::string::npos);
  std::ifstream s(svg), h(html);
  std::string svg_text((std::istreambuf_iterator<char>(s)), {}), html_text((std::istreambuf_iterator<char>(h)), {});
  EXPECT_NE(svg_text.find("<svg"), std::string::npos);
  EXPECT_NE(svg_text.find("Pipeline timeline"), std::string::npos);
  EXPECT_EQ(svg_text.rfind("<svg", 0), 0u);
  EXPECT_NE(html_text.find("<svg"), std::string::npos);
}

// The issue's new user: only the degrees given. Before, V, the micro-batch size, N and recompute
// defaulted to 1 / 1 / min(PP, M) / none: 33.6% MFU and "does not fit". Now the search chooses them
// and says why; the JSON keeps every key and adds `chosen` and `search`.
TEST(Cli, EstimateChoosesTheKnobsNotGiven) {
  const std::string degrees =
      "--model llama3-405b --cluster llama3-h100 --gpus 16384 --tp 8 --cp 1 --pp 16 --dp 128 --seq-len 8192 "
      "--global-batch 2048";
  CmdOut text = run("estimate " + degrees);
  ASSERT_EQ(text.status, 0) << text.out;
  EXPECT_EQ(text.out.find("DOES NOT FIT"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("--v 8 (chosen): fastest; the best with another value, --v "), std::string::npos) << text.out;
  CmdOut r = run("estimate " + degrees + " --json");
  ASSERT_EQ(r.status, 0) << r.out;
  herd::Json j = herd::Json::parse(r.out);
  for (const char* k : {"fits", "mfu", "tflops_per_gpu", "tokens_per_s", "step_time_s", "memory", "time", "layout",
                        "reliability", "chosen", "search"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["mfu"].get<double>(), 0.38);  // Table 4: 41%
  for (const char* k : {"v", "microbatch_size", "n", "recompute", "sequence_parallel"}) {
    const herd::Json& c = j["chosen"][k];
    EXPECT_FALSE(c["given"].get<bool>()) << k;
    EXPECT_FALSE(c["why"].get<std::string>().empty()) << k;
    EXPECT_EQ(c["value"], j["layout"][k]) << k;  // what it chose is the layout it costed
    ASSERT_TRUE(c.contains("runner_up")) << k;
    EXPECT_NE(c["runner_up"]["value"], c["value"]) << k;
  }
  EXPECT_TRUE(j["search"]["fits"].get<bool>());
  EXPECT_GT(j["search"]["variants_costed"].get<int>(), 10);

  // Given knobs are kept, and say so.
  CmdOut g = run("estimate " + degrees + " --v 4 --recompute full --json");
  ASSERT_EQ(g.status, 0) << g.out;
  herd::Json h = herd::Json::parse(g.out);
  EXPECT_EQ(h["layout"]["v"], 4);
  EXPECT_EQ(h["layout"]["recompute"], "full");
  EXPECT_TRUE(h["chosen"]["v"]["given"].get<bool>());
  EXPECT_TRUE(h["chosen"]["recompute"]["given"].get<bool>());
  EXPECT_FALSE(h["chosen"]["n"]["given"].get<bool>());
}

TEST(Cli, EstimateWhereNothingFitsSaysWhatWould) {
  CmdOut r =
      run("estimate --model llama3-405b --cluster llama3-h100 --gpus 64 --tp 8 --cp 1 --pp 2 --dp 4 "
          "--seq-len 8192 --global-batch 64 --recompute none");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("No variant of these degrees fits: the leanest variant needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos);
  CmdOut j =
      run("estimate --model llama3-405b --cluster llama3-h100 --gpus 64 --tp 8 --cp 1 --pp 2 --dp 4 --seq-len 8192 "
          "--global-batch 64 --json");
  ASSERT_EQ(j.status, 0) << j.out;
  herd::Json k = herd::Json::parse(j.out);
  EXPECT_FALSE(k["fits"].get<bool>());
  EXPECT_FALSE(k["search"]["fits"].get<bool>());
  EXPECT_NE(k["search"]["to_fit"].get<std::string>().find("accelerators with at least"), std::string::npos);
}

TEST(Cli, EstimateGivenKnobOutsideItsRangeNamesIt) {
  CmdOut r =
      run("estimate --model llama3-405b --cluster llama3-h100 --gpus 16384 --tp 8 --cp 1 --pp 16 --dp 128 "
          "--seq-len 8192 --global-batch 2048 --microbatch-size 1 --n 64");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("n (64) must be in [1, M = 16]"), std::string::npos) << r.out;
}

TEST(Cli, ImpossibleLayoutExitsOneWithTheNumbers) {
  CmdOut r =
      run("estimate --model llama3-405b --cluster llama3-h100 --gpus 16384 --tp 16 --cp 1 --pp 8 --dp 128 "
          "--seq-len 8192 --global-batch 2048");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("num_key_value_heads (8) is not divisible by tp (16)"), std::string::npos) << r.out;
}

TEST(Cli, BadClusterFileNamesTheField) {
  const std::string path = std::string(::testing::TempDir()) + "/bad_cluster.json";
  std::ofstream(path) << R"({"name": "x", "accelerator": {"name": "g", "peak_tflops": {"bf16": 100},
    "memory_gib": 80, "memory_bw_gb_per_s": 2000},
    "tiers": [{"name": "nv", "size": 8, "bw_gb_per_s": 100, "latency_us": 2},
              {"name": "ib", "size": 64, "bw_gb_per_s": "fast", "latency_us": 5}]})";
  CmdOut r = run("estimate --model llama3-8b --cluster " + path +
                 " --gpus 64 --tp 8 --cp 1 --pp 1 --dp 8 --seq-len 8192 --global-batch 64");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("tiers[1].bw_gb_per_s"), std::string::npos) << r.out;
}

TEST(Cli, PlanJsonIsAListBestFirst) {
  CmdOut r =
      run("plan --model llama3-8b --cluster dgx-h100 --gpus 64 --seq-len 8192 --global-batch 256 --top 3 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  herd::Json j = herd::Json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 3u);
  EXPECT_LE(j[0]["step_time_s"].get<double>(), j[1]["step_time_s"].get<double>());
  CmdOut t =
      run("plan --model llama3-8b --cluster dgx-h100 --gpus 64 --seq-len 8192 --global-batch 256 --top 3 --explain");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("Rejected families"), std::string::npos);
  EXPECT_NE(t.out.find("Winner, explained"), std::string::npos);
}

TEST(Cli, ScalingBookJobSummary) {
  CmdOut r =
      run("estimate --model llama3-70b --cluster tpu-v5p --gpus 8192 --tp 4 --cp 2 --pp 1 --dp 1024 "
          "--recompute full --seq-len 4096 --global-batch 1024 --checkpoints-per-layer 2 --train-tokens 15e12 "
          "--assume-mfu 0.4 --job-gpus 8960 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  herd::Json j = herd::Json::parse(r.out)["job"];
  EXPECT_NEAR(j["train_flops_6n"].get<double>(), 6.3e24, 0.1e24);
  EXPECT_NEAR(j["train_days_at_assumed_mfu_6n"].get<double>(), 44, 1.0);  // the book's 44 days on 8,960 chips
  // 4,194,304 tokens per batch (1024 x 4096): 11.0 TB of checkpoints, 11.7 TB in all; the book
  // rounds the batch to 4e6 tokens for its 10.5 and 11.2 TB (see validation_test.cpp).
  EXPECT_NEAR(j["job_memory"]["total_bytes"].get<double>() / 1e12, 11.7, 0.1);
}

}  // namespace
