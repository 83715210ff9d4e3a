// `herd trace` as a user runs it, on the dumps of real hung jobs: `herd train` with ranks as threads,
// `fault.hang_rank` R stopping at the start of a step and a short `parallel.comm_timeout_s`, in a
// TP2 x DP2 job and an 8-rank TP2 x CP2 x PP2 job. The injected rank is the independent truth: the
// trace must name R (and only R) as the culprit, say that it is outside communication with its last
// completed step, and name the call its peers wait in. Also: --svg, --job and the one-line errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "cli/cli_runner.h"
#include "cli/xml_check.h"
#include "common/test_model.h"
#include "herd/core/json.h"
#include "herd/data/shard.h"
#include "train/dist_harness.h"

namespace herd::cli {
namespace {

namespace fs = std::filesystem;
using herd::testing::run_herd;

class TraceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("herd_trace_cli" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_TRUE(data::write_shard((dir_ / "train-00000.bin").string(), *train::testing::parity_docs(40, 1)).ok());
    std::ofstream((dir_ / "config.json").string()) << model::config_to_hf_json(train::testing::parity_model()).dump();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Trains the parity model with `layout`, rank `hang` stopping at the start of step 3; returns the
  // diagnostics directory the dumps went to.
  std::string hung_job(const std::string& name, const std::string& layout, int hang) {
    const std::string dumps = (dir_ / (name + "_dumps")).string();
    auto r =
        run_herd("train --data.dir=" + dir_.string() + " --model.name=" + (dir_ / "config.json").string() +
                 " --data.seq_len=16 --train.global_batch=8 --parallel.microbatch_size=2 --train.steps=6"
                 " --optim.lr=1e-2 --eval.every=0 --generate.samples=0 --checkpoint.dir=" +
                 (dir_ / name).string() + " --parallel.comm_timeout_s=2 --fault.hang_rank=" + std::to_string(hang) +
                 " --fault.hang_step=3 --fault.hang_seconds=300 --diagnostics.dir=" + dumps + " " + layout);
    EXPECT_EQ(r.status, 1) << r.err;
    return dumps;
  }

  void expect_names_hung_rank(const std::string& dumps, int hang, int world) {
    auto r = run_herd("trace " + dumps + " --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j["culprit_ranks"], Json::array({hang})) << r.out;
    EXPECT_TRUE(j["desync"].is_array() && j["desync"].empty()) << r.out;
    ASSERT_EQ(j["ranks"].size(), static_cast<std::size_t>(world));
    EXPECT_TRUE(j["ranks"][hang]["call"].is_null()) << j["ranks"][hang].dump();
    EXPECT_EQ(j["ranks"][hang]["in"], "outside communication");
    EXPECT_EQ(j["ranks"][hang]["last_step"], 2);
    // Every other rank waits (directly or down the chain) in a call; the first disagreement is one
    // that rank `hang` never posted.
    for (int q = 0; q < world; ++q) {
      if (q == hang) continue;
      EXPECT_EQ(j["ranks"][q]["role"], "victim") << j["ranks"][q].dump();
      EXPECT_FALSE(j["ranks"][q]["call"].is_null()) << j["ranks"][q].dump();
    }
    ASSERT_FALSE(j["first_disagreement"].is_null());
    EXPECT_EQ(j["first_disagreement"]["missing"], Json::array({hang})) << j["first_disagreement"].dump();
    // The text says the same.
    auto t = run_herd("trace " + dumps);
    ASSERT_EQ(t.status, 0) << t.err;
    std::cout << t.out;  // what a user sees, in the test log
    EXPECT_NE(t.out.find("culprit: rank " + std::to_string(hang) + ", outside communication (last activity 'step 3')"),
              std::string::npos)
        << t.out;
    EXPECT_NE(t.out.find("first disagreement: " + j["first_disagreement"]["op"].get<std::string>()), std::string::npos);
  }

  fs::path dir_;
};

TEST_F(TraceCli, HangInATp2Dp2JobNamesTheHungRank) {
  const std::string dumps = hung_job("tp2dp2", "--tp 2 --dp 2", 1);
  expect_names_hung_rank(dumps, 1, 4);
  // The timeline is well-formed SVG that marks the culprit.
  const std::string svg = (dir_ / "t.svg").string();
  auto r = run_herd("trace " + dumps + " --svg " + svg);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = herd::testing::slurp(svg);
  EXPECT_EQ(herd::testing::xml_wellformed_error(text), "");
  EXPECT_NE(text.find("rank 1 (culprit)"), std::string::npos);
  EXPECT_NE(text.find("group &apos;tp&apos;"), std::string::npos);
}

TEST_F(TraceCli, HangInAn8RankTp2Cp2Pp2JobNamesTheHungRank) {
  const std::string dumps = hung_job("4d", "--tp 2 --cp 2 --pp 2", 5);
  expect_names_hung_rank(dumps, 5, 8);
}

#if HERD_HAVE_MPI
// The same TP2 x DP2 hang with one MPI process per rank: each process dumps when its own collective
// times out (or, for the hung one, when its watchdog fires, unless mpirun ends it first), so the dumps
// are not one snapshot and the hung rank's may be missing. The culprit is still rank 1 alone.
// Runs the parity model under mpirun with `np` processes and `layout`, rank `hang` stopping at step 3,
// and checks that `herd trace` names it alone.
void expect_mpi_hang_named(const fs::path& dir, const std::string& name, int np, const std::string& layout, int hang) {
  const std::string dumps = (dir / (name + "_dumps")).string(), log = (dir / (name + ".log")).string();
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np " +
      std::to_string(np) + " " + std::string(HERD_BINARY) + " train --data.dir=" + dir.string() +
      " --model.name=" + (dir / "config.json").string() +
      " --data.seq_len=16 --train.global_batch=8 --parallel.microbatch_size=2 --train.steps=6"
      " --optim.lr=1e-2 --eval.every=0 --generate.samples=0 --checkpoint.dir=" +
      (dir / name).string() + " --parallel.comm_timeout_s=2 --fault.hang_rank=" + std::to_string(hang) +
      " --fault.hang_step=3 --fault.hang_seconds=300 --diagnostics.dir=" + dumps + " " + layout + " > " + log + " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0) << herd::testing::slurp(log);
  auto r = run_herd("trace " + dumps + " --json");
  ASSERT_EQ(r.status, 0) << r.err << herd::testing::slurp(log);
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["culprit_ranks"], Json::array({hang})) << r.out;
  EXPECT_TRUE(j["desync"].empty()) << r.out;
  EXPECT_TRUE(j["ranks"][hang]["call"].is_null()) << r.out;
  const std::string in = j["ranks"][hang]["in"].get<std::string>();
  EXPECT_TRUE(in == "outside communication" || in == "no dump") << in;
  std::cout << run_herd("trace " + dumps).out;  // what a user sees, in the test log
}

TEST_F(TraceCli, HangInAnMpiTp2Dp2JobNamesTheHungRank) { expect_mpi_hang_named(dir_, "mpi", 4, "--tp 2 --dp 2", 1); }

TEST_F(TraceCli, HangInAnMpi8RankTp2Cp2Pp2JobNamesTheHungRank) {
  expect_mpi_hang_named(dir_, "mpi4d", 8, "--tp 2 --cp 2 --pp 2", 5);
}
#endif

// diagnostics.dump_every: a healthy TP2 x DP2 job whose rank 2 is slowed 3x from step 10
// (fault.slow_rank) leaves every rank's dump every 10 steps; `herd trace` on them names no culprit, each
// rank's last step, and rank 2 as the slowest straggler, as the trainer's own checks did (its metrics:
// rank 2, from a check within 20 steps of its slowdown). `launcher` runs the job under mpirun, one
// process per rank; empty, as threads of one process. The figures are the host's measured clocks, so
// only what holds on a loaded host is asserted: rank 2 computes 3x its own compute, which no
// scheduler's noise (healthy ranks measured up to 1.33x apart) brings near the 1.3x threshold, so it is
// flagged and is the slowest; whether a healthy rank is flagged too on a noisy host is the straggler
// bench's figure (bench/diagnosis), and the live watch's exact outcome is asserted on scripted clocks in
// tests/train/straggler_test.cpp.
void expect_straggler_named(const fs::path& dir, const std::string& name, const std::string& launcher) {
  const std::string model = (dir / "straggler.json").string();
  std::ofstream(model) << model::config_to_hf_json(herd::test_models::straggler_llama()).dump();
  const std::string dumps = (dir / name).string(), metrics = (dir / (name + ".jsonl")).string();
  const herd::testing::CliResult r = herd::testing::run_herd_env(
      launcher, "train --data.dir=" + dir.string() + " --model.name=" + model +
                    " --data.seq_len=64 --train.global_batch=8 --parallel.microbatch_size=2 --tp 2 --dp 2"
                    " --train.steps=40 --train.threads=1 --eval.every=0 --generate.samples=0 --fault.slow_rank=2"
                    " --fault.slow_factor=3 --fault.slow_from_step=10 --diagnostics.dump_every=10"
                    " --diagnostics.job_id=slow --diagnostics.dir=" +
                    dumps + " --train.metrics_file=" + metrics);
  ASSERT_EQ(r.status, 0) << r.err;
  const herd::testing::CliResult t = run_herd("trace " + dumps + " --json");
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(r.err.find("straggler at step"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stragglers in "), std::string::npos) << r.err;  // the end summary
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(fs::exists(fs::path(dumps) / ("herd_flight_slow_rank" + std::to_string(rank) + ".json"))) << rank;
  }
  const Json j = Json::parse(t.out);
  EXPECT_TRUE(j["culprit_ranks"].empty()) << t.out;
  ASSERT_GE(j["stragglers"].size(), 1u) << t.out;
  EXPECT_EQ(j["stragglers"][0]["rank"], 2) << t.out;  // the slowest first
  EXPECT_EQ(j["stragglers"][0]["kind"], "slow") << t.out;
  EXPECT_GT(j["stragglers"][0]["slowdown"].get<double>(), 2.0) << t.out;
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(j["ranks"][rank]["last_step"], 40) << t.out;
  std::ifstream in(metrics);
  std::int64_t first = -1;
  for (std::string line; std::getline(in, line);) {
    const Json m = Json::parse(line);
    if (!m.contains("stragglers")) continue;
    for (const Json& s : m["stragglers"]) {
      ASSERT_TRUE(s.contains("slowdown"));
      if (s["rank"] == 2 && first < 0) first = m["step"].get<std::int64_t>();
    }
  }
  EXPECT_GT(first, 10) << "rank 2 was never flagged";
  EXPECT_LE(first, 30) << "rank 2 was flagged " << first - 10 << " steps after its slowdown";
  auto text = run_herd("trace " + dumps);
  std::cout << text.out;
  EXPECT_NE(text.out.find("straggler: rank 2"), std::string::npos) << text.out;
}

TEST_F(TraceCli, PeriodicDumpsOfAJobWithASlowRankNameTheStraggler) { expect_straggler_named(dir_, "threads", ""); }

// herd trace --plan: a PP2 x DP2 job (stage 1 holds the head: the plan costs it more than stage 0) whose
// rank 3 computes 3x its work from step 5 leaves periodic dumps and its projection file; held against
// the plan, rank 3 is the one that departs (about 3x beyond the run's ratio, where scheduler noise moves
// healthy ranks by tens of percent), not stage 1 for being heavier, in text and in JSON.
TEST_F(TraceCli, AgainstThePlanTheSlowRankOfAPipelineIsNamed) {
  const std::string model = (dir_ / "straggler.json").string();
  std::ofstream(model) << model::config_to_hf_json(herd::test_models::straggler_llama()).dump();
  const std::string dumps = (dir_ / "plan_dumps").string(), proj = (dir_ / "plan.json").string();
  const herd::testing::CliResult r =
      run_herd("train --data.dir=" + dir_.string() + " --model.name=" + model +
               " --data.seq_len=64 --train.global_batch=8 --parallel.microbatch_size=2 --pp 2 --dp 2 --train.steps=20"
               " --train.threads=1 --eval.every=0 --generate.samples=0 --fault.slow_rank=3 --fault.slow_factor=3"
               " --fault.slow_from_step=5 --diagnostics.dump_every=20 --diagnostics.job_id=plan --diagnostics.dir=" +
               dumps + " --train.projection_file=" + proj);
  ASSERT_EQ(r.status, 0) << r.err;
  const herd::testing::CliResult t = run_herd("trace " + dumps + " --plan " + proj + " --json");
  ASSERT_EQ(t.status, 0) << t.err;
  const Json j = Json::parse(t.out);
  ASSERT_TRUE(j.contains("plan")) << t.out;
  EXPECT_EQ(j["plan"]["departing_rank"], 3) << t.out;
  EXPECT_EQ(j["plan"]["departing_stage"], -1) << t.out;
  EXPECT_GT(j["plan"]["ranks"][3]["departure"].get<double>(), 2.0) << t.out;
  EXPECT_EQ(j["plan"]["ranks"][3]["stage"], 1) << t.out;
  const herd::testing::CliResult text = run_herd("trace " + dumps + " --plan " + proj);
  std::cout << text.out;
  EXPECT_NE(text.out.find("rank 3 (stage 1) departs most from the plan"), std::string::npos) << text.out;
  const herd::testing::CliResult bad = run_herd("trace " + dumps + " --plan " + model);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("no \"planned\" object"), std::string::npos) << bad.err;
  EXPECT_EQ(herd::testing::count_lines(bad.err), 1) << bad.err;
}

#if HERD_HAVE_MPI
// The pid of the MPI rank `rank` whose command line names `marker` (-1 when there is none yet).
pid_t mpi_rank_pid(int rank, const std::string& marker) {
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = herd::testing::slurp((e.path() / "cmdline").string());
    if (cmdline.find(marker) == std::string::npos || cmdline.find("mpirun") != std::string::npos) continue;
    std::string env = herd::testing::slurp((e.path() / "environ").string());
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (("\n" + env).find("\nOMPI_COMM_WORLD_RANK=" + std::to_string(rank) + "\n") != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

// One rank of a 36-step DP2 job (one MPI process per rank) stopped 75% of the time by SIGSTOP and
// SIGCONT from outside (30 ms stopped, 10 ms running). Its CPU time is its peer's, so it is not slow; it is named as
// stalled, with its peer waiting on it. The model is the straggler model with a vocabulary of 8192 and
// four micro-batches of 2 x 64 tokens per rank (about 25 ms of compute a step on a Zen 5 core), so that
// most stops land while the rank computes rather than while it waits in a collective, where its peer is
// blocked with it and nothing tells them apart, and every step holds stops (the figures are medians
// over steps). The figures are the host's measured clocks: a rank stopped 60% of the time read 3.2x its
// peer's own time (comm/stragglers.h), 75% reads more, against the 2x stall threshold; the slow
// threshold is raised to 3x, out of
// reach of the CPU-time noise between two healthy processes on a loaded host (up to 1.33x measured),
// since this test is about the stall.
TEST_F(TraceCli, AnMpiRankStoppedMostOfTheTimeIsFlaggedAsStalled) {
  const std::string model = (dir_ / "straggler.json").string();
  model::LlamaConfig m = herd::test_models::straggler_llama();
  m.vocab = 8192;
  std::ofstream(model) << model::config_to_hf_json(m).dump();
  const std::string metrics = (dir_ / "stopped.jsonl").string(), log = (dir_ / "stopped.log").string();
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 mpirun --allow-run-as-root --oversubscribe "
      "--bind-to none -np 2 " +
      std::string(HERD_BINARY) + " train --data.dir=" + dir_.string() + " --model.name=" + model +
      " --data.seq_len=64 --train.global_batch=16 --parallel.microbatch_size=2 --dp 2"
      " --train.steps=36 --train.threads=1 --eval.every=0 --generate.samples=0"
      " --diagnostics.straggler_threshold=3 --train.metrics_file=" +
      metrics + " >" + log + " 2>&1";
  const pid_t job = ::fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  pid_t victim = -1;
  for (int i = 0; i < 600 && victim < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    victim = mpi_rank_pid(1, metrics);
  }
  int status = 0;
  bool done = false;
  while (!done) {
    if (victim > 0) ::kill(victim, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    if (victim > 0) ::kill(victim, SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    done = ::waitpid(job, &status, WNOHANG) == job;
  }
  ASSERT_GT(victim, 0) << "rank 1's process was not found\n" << herd::testing::slurp(log);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << herd::testing::slurp(log);
  std::ifstream in(metrics);
  int flagged = 0;
  for (std::string line; std::getline(in, line);) {
    const Json m = Json::parse(line);
    if (!m.contains("stragglers")) continue;
    for (const Json& s : m["stragglers"]) {
      EXPECT_EQ(s["rank"], 1) << line;
      EXPECT_EQ(s["kind"], "stalled") << line;
      EXPECT_EQ(s["waited_on_by"], Json::array({0})) << line;
      ++flagged;
    }
  }
  EXPECT_GT(flagged, 0) << herd::testing::slurp(log);
  EXPECT_NE(herd::testing::slurp(log).find("is stalled"), std::string::npos);
}

// The same across processes, one MPI process per rank.
TEST_F(TraceCli, AnMpiRankSlowedThreeTimesIsFlaggedAndTraced) {
  expect_straggler_named(dir_, "mpi",
                         "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 mpirun --allow-run-as-root --oversubscribe "
                         "--bind-to none -np 4");
}
#endif

// Hand-made dumps of a desync (rank 1 all-reduces 12 elements where ranks 0 and 2 all-reduce 10, at the
// same sequence number of the world group): the command reports it, with the odd rank apart.
TEST_F(TraceCli, ADesyncIsReported) {
  for (int r = 0; r < 3; ++r) {
    const Json e{{"id", 0},
                 {"seq", 4},
                 {"group", "world"},
                 {"group_id", 0},
                 {"op", "all_reduce"},
                 {"dtype", "fp32"},
                 {"count", r == 1 ? 12 : 10},
                 {"reduce", "sum"},
                 {"t_post", 1.0},
                 {"t_start", 1.0},
                 {"t_end", -1},
                 {"state", "failed"}};
    const Json d{{"rank", r},
                 {"activity", "step 5"},
                 {"groups", Json::array({Json{{"group_id", 0}, {"name", "world"}, {"members", {0, 1, 2}}}})},
                 {"entries", Json::array({e})}};
    std::ofstream((dir_ / ("herd_flight_d_rank" + std::to_string(r) + ".json")).string()) << d.dump();
  }
  auto r = run_herd("trace " + dir_.string() + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["desync"].size(), 1u) << r.out;
  EXPECT_EQ(j["desync"][0]["seq"], 4);
  EXPECT_EQ(j["desync"][0]["variants"][0]["ranks"], Json::array({0, 2}));
  EXPECT_EQ(j["desync"][0]["variants"][1]["ranks"], Json::array({1}));
  EXPECT_EQ(j["desync"][0]["variants"][1]["count"], 12);
  EXPECT_EQ(j["ranks"][1]["last_step"], 4);
  auto t = run_herd("trace " + dir_.string());
  EXPECT_NE(t.out.find("desync: 'world' (group 0) #4: all_reduce 10 fp32 sum on ranks 0,2; all_reduce 12 fp32 sum on "
                       "ranks 1"),
            std::string::npos)
      << t.out;
}

TEST_F(TraceCli, ErrorsAreOneLineWithTheFix) {
  auto r = run_herd("trace " + (dir_ / "none").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("is not a directory"), std::string::npos) << r.err;
  EXPECT_EQ(herd::testing::count_lines(r.err), 1) << r.err;
  r = run_herd("trace " + dir_.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no flight-recorder dumps"), std::string::npos) << r.err;
  std::ofstream((dir_ / "herd_flight_j1_rank0.json").string()) << "{\"rank\": 0, \"entries\": [{\"id\": 0}]}";
  r = run_herd("trace " + dir_.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("herd_flight_j1_rank0.json: entries[0].seq"), std::string::npos) << r.err;
  EXPECT_EQ(herd::testing::count_lines(r.err), 1) << r.err;
  r = run_herd("trace " + dir_.string() + " --job j2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--job 'j2'"), std::string::npos) << r.err;
  std::ofstream((dir_ / "herd_flight_j1_rank0.json").string()) << "{\"rank\": 0, \"entries\": []}";
  r = run_herd("trace " + dir_.string() + " --svg " + (dir_ / "no" / "such" / "dir.svg").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--svg"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace herd::cli
