// `herd schedule` end to end: the binary is run through popen and its exit status, JSON and one-line
// errors are checked (the contract of src/herd/cli/app.h).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "herd/core/json.h"

namespace herd {
namespace {

struct CliRun {
  int status;
  std::string out;
};

// Runs `herd schedule ARGS`; `stderr_only` keeps stderr and drops stdout.
CliRun herd_schedule(const std::string& args, bool stderr_only = false) {
  const std::string cmd =
      std::string(HERD_BINARY) + " schedule " + args + (stderr_only ? " 2>&1 >/dev/null" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  HERD_CHECK(p != nullptr, "popen failed: ", cmd);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

Json json_of(const std::string& args) {
  const CliRun r = herd_schedule(args + " --json");
  EXPECT_EQ(r.status, 0) << args;
  Result<Json> j = parse_json_text(r.out, "herd schedule --json");
  HERD_CHECK(j.ok(), j.error().message());
  return *j;
}

TEST(ScheduleCli, FigureSixExamplePrintsEverything) {
  const CliRun r = herd_schedule("--pp 4 --v 2 --microbatches 10 --n 5 --layers 30");
  ASSERT_EQ(r.status, 0);
  for (const char* want : {"Layer split", "Timeline", "rank 3", "Step time", "Bubble", "peak in-flight"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want;
  }
}

TEST(ScheduleCli, JsonHasTheFieldsAndTextbookBubble) {
  for (const char* kind : {"gpipe", "1f1b"}) {
    const Json j = json_of(std::string("--schedule ") + kind + " --pp 4 --microbatches 12 --cost uniform");
    EXPECT_NEAR(j["bubble_ratio"].get<double>(), 3.0 / 12, 1e-12) << kind;
  }
  const Json i = json_of("--schedule interleaved --pp 4 --v 3 --microbatches 8 --cost uniform");
  EXPECT_NEAR(i["bubble_ratio"].get<double>(), 3.0 / 24, 1e-12);
  const Json f = json_of("--pp 4 --v 2 --microbatches 10 --n 5 --cost uniform");
  EXPECT_NEAR(f["bubble_ratio"].get<double>(), 3.0 / 20, 1e-12);
  EXPECT_NEAR(f["step_time"].get<double>(), 3.0 * (20 + 3), 1e-9);
  EXPECT_NEAR(f["bubble_fraction"].get<double>(), 9.0 / 69, 1e-12);
  ASSERT_EQ(f["peak_inflight"].size(), 4u);
  ASSERT_EQ(f["stages"].size(), 8u);
  ASSERT_EQ(f["actions"].size(), 4u);
  EXPECT_EQ(f["actions"][0][0]["type"], "forward");
  // Default layers: 4*PP*V - 2 = 30, split 3, 4, ..., 4, 3.
  EXPECT_EQ(f["stages"][0].size(), 3u);
  EXPECT_EQ(f["stages"][1].size(), 4u);
}

TEST(ScheduleCli, FewerMicrobatchesThanRanksAndRaggedGroups) {
  const Json a = json_of("--pp 8 --v 2 --microbatches 4 --n 4");
  EXPECT_GT(a["bubble_ratio"].get<double>(), 7.0 / 8);
  const Json b = json_of("--pp 4 --v 2 --microbatches 11 --n 3 --cost uniform");
  EXPECT_GT(b["bubble_ratio"].get<double>(), 3.0 / 22);
}

TEST(ScheduleCli, LighterEndsBeatEvenSplitWithOutputCost) {
  const Json light = json_of("--pp 4 --v 2 --microbatches 8 --n 4 --layers 30");
  const Json even = json_of("--pp 4 --v 2 --microbatches 8 --n 4 --layers 30 --even-split");
  EXPECT_LT(light["step_time"].get<double>(), even["step_time"].get<double>());
}

TEST(ScheduleCli, BadInputIsOneLineAndExitOne) {
  const struct {
    const char* args;
    const char* want;
  } cases[] = {
      {"--v 0", "v (0) must be at least 1"},
      {"--microbatches 10 --n 12", "n (12) must not exceed microbatches (10)"},
      {"--pp 4 --v 2 --layers 5", "layers (5) cannot fill pp*v = 4*2 = 8"},
      {"--schedule interleaved --pp 4 --microbatches 6", "microbatches (6) must be a multiple of pp (4)"},
      {"--schedule zb", "unknown kind \"zb\""},
      {"--schedule 1f1b --v 2", "v (2) must be 1"},
      {"--cost fancy", "--cost: unknown model"},
      {"--pp 0", "pp (0) must be at least 1"},
      {"--output-cost -1", "--output-cost (-1) must be >= 0"},
      {"--schedule interleaved --pp 4 --n 3", "--n (3) is fixed to --pp (4)"},
  };
  for (const auto& c : cases) {
    const CliRun r = herd_schedule(c.args, true);
    EXPECT_EQ(r.status, 1) << c.args;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << c.args << ": " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << c.args << ": " << r.out;
    EXPECT_EQ(r.out.rfind("herd schedule: error: ", 0), 0u) << r.out;
  }
  const CliRun unknown = herd_schedule("--nonsense", true);
  EXPECT_EQ(unknown.status, 2);
}

TEST(ScheduleCli, WritesSvg) {
  const std::string path = ::testing::TempDir() + "herd_schedule_test.svg";
  ASSERT_EQ(herd_schedule("--pp 4 --v 2 --microbatches 6 --n 6 --svg " + path).status, 0);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string svg = ss.str();
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("rank 3"), std::string::npos);
  EXPECT_NE(svg.find("idle (bubble)"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace herd
