// `herd estimate` and `herd plan` as other tools call them: JSON field names, exit codes and one-line
// errors that name the field or constraint.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "cli/cli_runner.h"
#include "herd/core/json.h"

namespace {

using herd::testing::run_herd_combined;

auto run(const std::string& args) { return run_herd_combined(args); }

const std::string kMeta =
    "--model llama3-405b --cluster llama3-h100 --gpus 16384 --tp 8 --cp 1 --pp 16 --dp 128 --v 8 "
    "--recompute selective --seq-len 8192 --global-batch 2048";

TEST(Cli, EstimateJsonHasTheContractFields) {
  herd::testing::CliResult r = run("estimate " + kMeta + " --json");
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
  herd::testing::CliResult r = run("estimate " + kMeta + " --svg " + svg + " --html " + html);
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
  herd::testing::CliResult text = run("estimate " + degrees);
  ASSERT_EQ(text.status, 0) << text.out;
  EXPECT_EQ(text.out.find("DOES NOT FIT"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("--v 8 (chosen): fastest; the best with another value, --v "), std::string::npos) << text.out;
  herd::testing::CliResult r = run("estimate " + degrees + " --json");
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
  herd::testing::CliResult g = run("estimate " + degrees + " --v 4 --recompute full --json");
  ASSERT_EQ(g.status, 0) << g.out;
  herd::Json h = herd::Json::parse(g.out);
  EXPECT_EQ(h["layout"]["v"], 4);
  EXPECT_EQ(h["layout"]["recompute"], "full");
  EXPECT_TRUE(h["chosen"]["v"]["given"].get<bool>());
  EXPECT_TRUE(h["chosen"]["recompute"]["given"].get<bool>());
  EXPECT_FALSE(h["chosen"]["n"]["given"].get<bool>());
}

TEST(Cli, EstimateWhereNothingFitsSaysWhatWould) {
  herd::testing::CliResult r =
      run("estimate --model llama3-405b --cluster llama3-h100 --gpus 64 --tp 8 --cp 1 --pp 2 --dp 4 "
          "--seq-len 8192 --global-batch 64 --recompute none");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("No variant of these degrees fits: the leanest variant needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos);
  herd::testing::CliResult j =
      run("estimate --model llama3-405b --cluster llama3-h100 --gpus 64 --tp 8 --cp 1 --pp 2 --dp 4 --seq-len 8192 "
          "--global-batch 64 --json");
  ASSERT_EQ(j.status, 0) << j.out;
  herd::Json k = herd::Json::parse(j.out);
  EXPECT_FALSE(k["fits"].get<bool>());
  EXPECT_FALSE(k["search"]["fits"].get<bool>());
  EXPECT_NE(k["search"]["to_fit"].get<std::string>().find("accelerators with at least"), std::string::npos);
}

TEST(Cli, EstimateGivenKnobOutsideItsRangeNamesIt) {
  herd::testing::CliResult r =
      run("estimate --model llama3-405b --cluster llama3-h100 --gpus 16384 --tp 8 --cp 1 --pp 16 --dp 128 "
          "--seq-len 8192 --global-batch 2048 --microbatch-size 1 --n 64");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("n (64) must be in [1, M = 16]"), std::string::npos) << r.out;
}

TEST(Cli, ImpossibleLayoutExitsOneWithTheNumbers) {
  herd::testing::CliResult r =
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
  herd::testing::CliResult r = run("estimate --model llama3-8b --cluster " + path +
                                   " --gpus 64 --tp 8 --cp 1 --pp 1 --dp 8 --seq-len 8192 --global-batch 64");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("tiers[1].bw_gb_per_s"), std::string::npos) << r.out;
}

TEST(Cli, PlanJsonIsAListBestFirst) {
  herd::testing::CliResult r =
      run("plan --model llama3-8b --cluster dgx-h100 --gpus 64 --seq-len 8192 --global-batch 256 --top 3 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  herd::Json j = herd::Json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 3u);
  EXPECT_LE(j[0]["step_time_s"].get<double>(), j[1]["step_time_s"].get<double>());
  herd::testing::CliResult t =
      run("plan --model llama3-8b --cluster dgx-h100 --gpus 64 --seq-len 8192 --global-batch 256 --top 3 --explain");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("Rejected families"), std::string::npos);
  EXPECT_NE(t.out.find("Winner, explained"), std::string::npos);
}

TEST(Cli, ScalingBookJobSummary) {
  herd::testing::CliResult r =
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

namespace {

double num(const herd::Json& j, const char* a, const char* b) { return j[a][b].get<double>(); }

// The step-time band beside the point: step_time_band_s {p10, p90} around step_time_s, the tokens/s,
// MFU and ETT bands derived from it, and the text line `step time X s (p10-p90 A-B s)`.
TEST(Cli, EstimateGivesTheStepTimeBand) {
  herd::testing::CliResult r = run("estimate " + kMeta + " --json");
  ASSERT_EQ(r.status, 0) << r.out;
  herd::Json j = herd::Json::parse(r.out);
  ASSERT_TRUE(j.contains("step_time_band_s")) << r.out;
  const double step = j["step_time_s"].get<double>();
  const double p10 = num(j, "step_time_band_s", "p10"), p90 = num(j, "step_time_band_s", "p90");
  EXPECT_LT(p10, step);
  EXPECT_GT(p90, step);
  EXPECT_NEAR(num(j, "tokens_per_s_band", "p10"), j["tokens_per_s"].get<double>() * step / p90, 1e-6 * step);
  EXPECT_NEAR(num(j, "tokens_per_s_band", "p90"), j["tokens_per_s"].get<double>() * step / p10, 1e-6 * step);
  EXPECT_NEAR(num(j, "mfu_band", "p10"), j["mfu"].get<double>() * step / p90, 1e-9);
  EXPECT_LE(num(j, "ett_band", "p10"), num(j, "ett_band", "p90"));
  // --software not given: the four presets' spread is one of the sources.
  EXPECT_EQ(j["band_sources"]["software_step_ratios"].size(), 4u);

  herd::testing::CliResult t = run("estimate " + kMeta);
  ASSERT_EQ(t.status, 0) << t.out;
  char line[128];
  std::snprintf(line, sizeof line, "step time %.3f s (p10-p90 %.3f-%.3f s)", step, p10, p90);
  EXPECT_NE(t.out.find(line), std::string::npos) << line << "\n" << t.out;
}

// With --software given there is no software spread: the band is narrower, the point the same.
TEST(Cli, EstimateBandWithTheSoftwareGivenIsNarrower) {
  herd::Json open = herd::Json::parse(run("estimate " + kMeta + " --json").out);
  herd::testing::CliResult r = run("estimate " + kMeta + " --software fused --json");
  ASSERT_EQ(r.status, 0) << r.out;
  herd::Json given = herd::Json::parse(r.out);
  EXPECT_EQ(given["step_time_s"].get<double>(), open["step_time_s"].get<double>());
  EXPECT_TRUE(given["band_sources"]["software_step_ratios"].empty());
  EXPECT_GT(num(open, "step_time_band_s", "p90") - num(open, "step_time_band_s", "p10"),
            num(given, "step_time_band_s", "p90") - num(given, "step_time_band_s", "p10"));
}

// Each plan entry carries its band and the ranks whose bands overlap its own; the list stays ordered
// by the point estimate, and the text says which ranks overlap.
TEST(Cli, PlanMarksLayoutsWhoseBandsOverlap) {
  const std::string args =
      "plan --model llama3-8b --cluster dgx-h100 --gpus 64 --seq-len 8192 --global-batch 256 --top 4";
  herd::testing::CliResult r = run(args + " --json");
  ASSERT_EQ(r.status, 0) << r.out;
  herd::Json j = herd::Json::parse(r.out);
  ASSERT_EQ(j.size(), 4u);
  int overlapping_pairs = 0;
  std::string pairs;
  for (std::size_t a = 0; a < j.size(); ++a) {
    EXPECT_EQ(j[a]["rank"].get<int>(), static_cast<int>(a) + 1);
    if (a > 0) {
      EXPECT_LE(j[a - 1]["step_time_s"].get<double>(), j[a]["step_time_s"].get<double>());
    }
    for (std::size_t b = 0; b < j.size(); ++b) {
      if (a == b) continue;
      const bool overlap = std::max(num(j[a], "step_time_band_s", "p10"), num(j[b], "step_time_band_s", "p10")) <=
                           std::min(num(j[a], "step_time_band_s", "p90"), num(j[b], "step_time_band_s", "p90"));
      const herd::Json& marks = j[a]["band_overlaps"];
      const bool marked = std::find(marks.begin(), marks.end(), herd::Json(static_cast<int>(b) + 1)) != marks.end();
      EXPECT_EQ(marked, overlap) << "#" << a + 1 << " and #" << b + 1;
      if (overlap && a < b) {
        ++overlapping_pairs;
        pairs += (pairs.empty() ? "" : ", ") + std::string("#") + std::to_string(a + 1) + "/#" + std::to_string(b + 1);
      }
    }
  }
  // Layouts of one model within a few percent of each other: their bands overlap.
  EXPECT_GT(overlapping_pairs, 0);
  herd::testing::CliResult t = run(args);
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("p10-p90 s"), std::string::npos);
  EXPECT_NE(t.out.find("Bands overlap, so their order is within the planner's uncertainty: " + pairs + "."),
            std::string::npos)
      << pairs << "\n"
      << t.out;
}

}  // namespace
