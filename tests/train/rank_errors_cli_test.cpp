// `herd train` faults that once aborted the process, run through the binary: a run far beyond the
// host's memory is one line with the planner's estimate, and a checkpoint manifest whose numbers would
// overflow the reader's arithmetic, or whose layout name is not a string, is refused with one line
// naming the field, with checkpoint.fallback as without. (A rank whose allocation fails all the same is
// tests/train/out_of_memory_test.cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli/cli_runner.h"
#include "herd/data/shard.h"
#include "train/dist_harness.h"
#include "train/parity_run_dir.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;
using herd::testing::CliResult;
using herd::testing::run_herd;

class RankErrors : public herd::testing::ParityRunDir {
 protected:
  RankErrors() : ParityRunDir("herd_rank_errors") {}
  std::string args() const {
    return "train " + data_and_model() + " --data.seq_len=16 --optim.lr=1e-2 --eval.every=0 --generate.samples=0 ";
  }
};

// Before: the allocation failed (std::bad_alloc, exit 134), or, for a model bigger than the host, the
// kernel killed the process after minutes of filling memory tensor by tensor. Now the run is refused
// before any rank starts, with the planner's figure. The sizes are beyond any host (2^36 sequences of a
// micro-batch; the 405B model), so the test refuses alike everywhere.
TEST_F(RankErrors, ARunFarBeyondTheHostsMemoryIsRefusedBeforeAnyRankStarts) {
  const std::string big = std::to_string(std::int64_t{1} << 36);
  const std::string cases[] = {
      args() + "--train.steps=1 --parallel.microbatch_size=" + big + " --train.global_batch=" + big,
      args() + "--dp 2 --train.steps=1 --parallel.microbatch_size=" + big +
          " --train.global_batch=" + std::to_string(std::int64_t{1} << 37),
      "train --data.dir=" + dir_.string() + " --model.name=llama3-405b --model.vocab=64 --data.seq_len=16 " +
          "--train.global_batch=1 --train.steps=1 --eval.every=0 --generate.samples=0",
  };
  for (const std::string& a : cases) {
    const CliResult r = run_herd(a);
    EXPECT_EQ(r.status, 1) << a << "\n" << r.err;
    EXPECT_NE(r.err.find("herd train: error: the planner estimates "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" per rank for this layout ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("beyond this host's "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("lower parallel.microbatch_size"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("| loss "), std::string::npos) << "no rank may start (no progress line): " << r.err;
    const std::string line = r.err.substr(std::min(r.err.size(), r.err.find("herd train: error:")));
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << r.err;
  }
}

// Before: a manifest with offset 9e18 passed the bounds check through a signed overflow, and a layout
// name of the wrong type threw from the trainer's resume message.
TEST_F(RankErrors, ManifestNumbersThatWouldOverflowAndMistypedFieldsAreRefused) {
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string run = args() + "--train.global_batch=8 --checkpoint.dir=" + ckpt + " --checkpoint.every=2 ";
  CliResult r = run_herd(run + "--train.steps=2");
  ASSERT_EQ(r.status, 0) << r.err;
  const fs::path manifest = fs::path(ckpt) / "step_00000002" / "manifest.json";
  const Json good = read_json_file(manifest.string()).value();
  struct Case {
    std::function<void(Json&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["files"][0]["pieces"][0]["offset"] = std::int64_t{9000000000000000000}; }, "does not fit"},
      {[](Json& j) {
         Json& p = j["files"][0]["pieces"][0];
         p["rows"] = (std::int64_t{1} << 40) - 1;
         p["cols"] = (std::int64_t{1} << 40) - 1;
         p["r1"] = (std::int64_t{1} << 40) - 1;
         p["c1"] = (std::int64_t{1} << 40) - 1;
         p["e1"] = std::int64_t{1} << 62;
       },
       "does not fit"},
      {[](Json& j) { j["layout"]["layout"] = 5; }, "layout.layout: expected a string"},
      {[](Json& j) { j["files"][0]["bytes"] = 18446744073709551615ULL; }, "bytes: expected an integer below 2^63"},
  };
  for (const Case& k : cases) {
    for (const char* fallback : {"false", "true"}) {
      Json edited = good;
      k.edit(edited);
      std::ofstream(manifest) << edited.dump();
      r = run_herd(run + "--train.steps=4 --checkpoint.resume=true --checkpoint.fallback=" + fallback);
      EXPECT_EQ(r.status, 1) << k.want << ": " << r.err;
      EXPECT_NE(r.err.find(k.want), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
    }
  }
}

// A metrics file on a full device (/dev/full takes the open and fails every write with ENOSPC): one
// line naming the file and the reason, a non-zero exit, on one rank and on two (rank 0 writes the file;
// the per-step control all-reduce ends the other rank with it).
TEST_F(RankErrors, AMetricsFileOnAFullDeviceIsOneLineNamingIt) {
  for (const std::string layout : {"", "--dp 2 "}) {
    const CliResult r =
        run_herd(args() + layout + "--train.steps=4 --train.global_batch=4 --train.metrics_file=/dev/full");
    EXPECT_EQ(r.status, 1) << layout << "\n" << r.err;
    const std::size_t at = r.err.find("herd train: error: ");
    ASSERT_NE(at, std::string::npos) << r.err;
    const std::string line = r.err.substr(at);
    EXPECT_NE(line.find("train.metrics_file '/dev/full': cannot write (No space left on device)"), std::string::npos)
        << r.err;
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace herd::train
