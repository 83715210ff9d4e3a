// `herd train` preempted as a scheduler does it: a real SIGTERM to the process (TP2 x DP2 as threads)
// while it trains. It exits with code 143 after a checkpoint, and the same command resumes and ends on
// the losses of an uninterrupted run, bit for bit (the metrics file's numbers round-trip exactly).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "cli/cli_runner.h"
#include "herd/data/shard.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "train/dist_harness.h"
#include "train/parity_run_dir.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

class PreemptCli : public herd::testing::ParityRunDir {
 protected:
  PreemptCli() : ParityRunDir("herd_preempt_cli") {}
  std::string args(const std::string& name, int steps = 150) {
    return "train " + data_and_model() +
           " --data.seq_len=16 --train.global_batch=8 --parallel.microbatch_size=2 --tp 2 --dp 2" +
           " --train.steps=" + std::to_string(steps) +
           " --optim.lr=1e-2 --eval.every=0 --generate.samples=0 --checkpoint.every=1000" +
           " --checkpoint.dir=" + (dir_ / name).string() + " --train.metrics_file=" + (dir_ / name).string() + ".jsonl";
  }
  // For the runs a signal cuts: rank 0 sleeps 9x its compute after each step (fault.slow_rank, stall: it
  // takes no CPU from the shell that polls and signals), so the 150 steps take seconds, not a second, and
  // a signal sent once a few steps are logged lands mid-run on a loaded host too. The math is unchanged.
  static constexpr const char* kSlowed =
      " --fault.slow_rank=0 --fault.slow_factor=10 --fault.slow_mode=stall --fault.slow_from_step=1";
  // step -> loss of a metrics file (a resumed run appends; a later line wins).
  std::map<std::int64_t, double> losses(const std::string& name) {
    std::map<std::int64_t, double> out;
    std::ifstream in((dir_ / name).string() + ".jsonl");
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line);
      out[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
    }
    return out;
  }
};

TEST_F(PreemptCli, SigtermExits143WithACheckpointThatResumesBitExactly) {
  const herd::testing::CliResult full = herd::testing::run_herd(args("full"));
  ASSERT_EQ(full.status, 0) << full.err;

  // Started in the background; SIGTERM once its metrics file has 3 steps.
  const std::string metrics = (dir_ / "cut").string() + ".jsonl";
  const std::string status = (dir_ / "status").string();
  const std::string cmd = "sh -c '" + std::string(HERD_BINARY) + " " + args("cut") + kSlowed + " >" + dir_.string() +
                          "/cut.out 2>&1 & p=$!; i=0; while [ $i -lt 3000 ] && [ \"$(cat " + metrics +
                          " 2>/dev/null | wc -l)\" -lt 3 ]; do sleep 0.01; i=$((i+1)); done; kill -TERM $p; wait $p; " +
                          "echo $? >" + status + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string code = herd::testing::slurp(status);
  const std::string out = herd::testing::slurp((dir_ / "cut.out").string());
  ASSERT_EQ(std::atoi(code.c_str()), 143) << out;
  EXPECT_NE(out.find("preempted"), std::string::npos) << out;
  const std::vector<std::string> saved = list_checkpoints((dir_ / "cut").string());
  ASSERT_EQ(saved.size(), 1u) << out;
  const std::int64_t stopped = losses("cut").rbegin()->first;
  ASSERT_LT(stopped, 150) << "the run ended before the signal; nothing was tested";
  EXPECT_EQ(fs::path(saved[0]).filename().string(), step_dir_name(stopped));

  const herd::testing::CliResult resumed = herd::testing::run_herd(args("cut"));
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  const std::map<std::int64_t, double> want = losses("full"), got = losses("cut");
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [step, loss] : want) EXPECT_EQ(got.at(step), loss) << "step " << step;
}

// SIGUSR2 asks every rank for its flight recorder and training goes on; SIGUSR1 does the same and then
// preempts (a checkpoint, exit 143). The dumps land in the run's diagnostics directory with the signal as
// their reason, and `herd trace` reads them.
TEST_F(PreemptCli, Sigusr2DumpsTheFlightRecordersAndSigusr1DumpsThenPreempts) {
  const std::string metrics = (dir_ / "sig").string() + ".jsonl";
  const std::string status = (dir_ / "status").string();
  auto wait_lines = [&](int n) {
    return "i=0; while [ $i -lt 3000 ] && [ \"$(cat " + metrics + " 2>/dev/null | wc -l)\" -lt " + std::to_string(n) +
           " ]; do sleep 0.01; i=$((i+1)); done; ";
  };
  const std::string cmd = "sh -c '" + std::string(HERD_BINARY) + " " + args("sig") + kSlowed +
                          " --diagnostics.job_id=sig >" + dir_.string() + "/sig.out 2>&1 & p=$!; " + wait_lines(3) +
                          "kill -USR2 $p; " + "i=0; while [ $i -lt 3000 ] && ! grep -q \"SIGUSR2: dump requested\" " +
                          dir_.string() + "/sig.out; do sleep 0.01; i=$((i+1)); done; " + wait_lines(12) +
                          "kill -USR1 $p; wait $p; echo $? >" + status + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string out = herd::testing::slurp((dir_ / "sig.out").string());
  ASSERT_EQ(std::atoi(herd::testing::slurp(status).c_str()), 143) << out;
  EXPECT_NE(out.find("SIGUSR2: dump requested"), std::string::npos) << out;
  EXPECT_NE(out.find("SIGUSR1: dump requested"), std::string::npos) << out;
  EXPECT_NE(out.find("preempted"), std::string::npos) << out;
  // Training went on after SIGUSR2: steps past the first dump, then the checkpoint of the preemption.
  EXPECT_GE(losses("sig").rbegin()->first, 12);
  EXPECT_EQ(list_checkpoints((dir_ / "sig").string()).size(), 1u) << out;
  const fs::path diag = dir_ / "sig" / "diagnostics";
  for (int r = 0; r < 4; ++r) {
    const fs::path f = diag / ("herd_flight_sig_rank" + std::to_string(r) + ".json");
    ASSERT_TRUE(fs::exists(f)) << f << "\n" << out;
    const Json j = Json::parse(herd::testing::slurp(f.string()));
    EXPECT_EQ(j["reason"].get<std::string>().rfind("SIGUSR1: dump requested", 0), 0u) << j["reason"];
    EXPECT_FALSE(j["steps"].empty());  // the step times the dump carries
  }
  const herd::testing::CliResult t = herd::testing::run_herd("trace " + diag.string() + " --json");
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_TRUE(Json::parse(t.out)["culprit_ranks"].empty()) << t.out;
}

// Ctrl-C on a plain `herd train` (TP2 x DP2 threads): SIGINT stops the job as SIGTERM does, after the
// step in progress, with a checkpoint of that step and exit code 130; the same command resumes from it.
TEST_F(PreemptCli, SigintCheckpointsTheCurrentStepExits130AndTheRunResumesFromIt) {
  const std::string metrics = (dir_ / "int").string() + ".jsonl", out = (dir_ / "int.out").string();
  const std::string cmd = "exec " + std::string(HERD_BINARY) + " " + args("int", 100000) + " >" + out + " 2>&1";
  const pid_t pid = herd::testing::spawn_shell(cmd);
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 600 && losses("int").size() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGINT);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  const std::string log = herd::testing::slurp(out);
  ASSERT_TRUE(WIFEXITED(st)) << "ended by signal " << WTERMSIG(st) << "\n" << log;
  ASSERT_EQ(WEXITSTATUS(st), 130) << log;
  EXPECT_NE(log.find("preempted: stopped after step"), std::string::npos) << log;
  EXPECT_NE(log.find("exit code 130"), std::string::npos) << log;
  const std::int64_t stopped = losses("int").rbegin()->first;
  const std::vector<std::string> saved = list_checkpoints((dir_ / "int").string());
  ASSERT_EQ(saved.size(), 1u) << log;
  EXPECT_EQ(fs::path(saved[0]).filename().string(), step_dir_name(stopped));

  const herd::testing::CliResult resumed = herd::testing::run_herd(args("int", static_cast<int>(stopped) + 2));
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from " + saved[0] + " (step " + std::to_string(stopped)), std::string::npos)
      << resumed.err;
  const std::map<std::int64_t, double> got = losses("int");
  ASSERT_EQ(got.size(), static_cast<std::size_t>(stopped + 2));
  EXPECT_EQ(got.rbegin()->first, stopped + 2);
}

}  // namespace
}  // namespace herd::train
