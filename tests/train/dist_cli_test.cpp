// `herd train --tp --dp` as a user runs it: layouts that do not fit the model or the batch, and a
// backend that cannot be used, are refused with one line and exit status 1 before any rank starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli_runner.h"
#include "herd/data/shard.h"
#include "train/dist_harness.h"
#include "train/parity_run_dir.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

class DistCli : public herd::testing::ParityRunDir {
 protected:
  DistCli() : ParityRunDir("herd_dist_cli", /*held_out=*/true) {}
  // A 5-step run of the parity model; returns the losses of the metrics file.
  std::vector<double> losses_of(const std::string& metrics) {
    std::vector<double> out;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line)["loss"].get<double>());
    return out;
  }
  std::string run_args(const std::string& metrics) {
    return "train " + data_and_model() +
           " --data.seq_len=16 --train.global_batch=8 --parallel.microbatch_size=4 --train.steps=5 --optim.lr=1e-2" +
           " --eval.every=0 --eval.batches=1 --generate.samples=0 --train.metrics_file=" + metrics;
  }
  herd::testing::CliResult train(const std::string& args) {
    return herd::testing::run_herd("train --data.dir=" + dir_.string() + " --model.vocab=64 --data.seq_len=64 " + args);
  }
};

TEST_F(DistCli, BadLayoutsAreRefusedWithTheNumbers) {
  auto r = train("--tp 3");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("num_attention_heads (8) is not divisible by tp (3)"), std::string::npos) << r.err;
  r = train("--dp 3 --global-batch 8");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("train.global_batch (8 sequences) is not divisible by parallel.dp (3)"), std::string::npos)
      << r.err;
  r = train("--tp 0");
  EXPECT_EQ(r.status, 2) << r.err;
}

TEST_F(DistCli, BadCpLayoutsAreRefusedWithTheNumbers) {
  auto r = train("--cp 3 --tp 2");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("seq_len (64) is not divisible by 2 x cp (6)"), std::string::npos) << r.err;
  r = train("--cp 2 --tp 4 --data.seq_len=20");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("seq_len / cp (20 / 2 = 10) is not divisible by tp (4), as sequence parallelism needs"),
            std::string::npos)
      << r.err;
  r = train("--cp 0");
  EXPECT_EQ(r.status, 2) << r.err;
}

TEST_F(DistCli, BadPipelineLayoutsAreRefusedWithTheNumbers) {
  auto refused = [&](const std::string& args, const std::string& want) {
    const auto r = train(args);
    EXPECT_EQ(r.status, 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.err.find("step 1"), std::string::npos) << args << ": no rank may start";
  };
  refused("--pp 2 --v 2 --global-batch 3 --microbatch-size 1 --n 4", "parallel.n (4) must be at most M = 3");
  refused("--pp 2 --v 2 --global-batch 3 --microbatch-size 1 --schedule interleaved",
          "microbatches (3) must be a multiple of pp (2)");
  refused("--pp 2 --v 2 --schedule 1f1b", "v (2) must be 1");
  refused("--pp 4 --v 4", "layers (8) cannot fill pp*v = 4*4 = 16");
  refused("--v 2", "parallel.v (2) needs parallel.pp > 1");
  refused("--pp 2 --schedule zigzag", "parallel.schedule");
  refused("--pp 2 --cp 4 --tp 2 --data.seq_len=20", "seq_len (20) is not divisible by 2 x cp (8)");
  refused("--microbatch-size 3",
          "train.global_batch (8 sequences) is not divisible by parallel.dp (1) x "
          "parallel.microbatch_size (3)");
}

TEST_F(DistCli, Tp2Cp2Pp2AsThreadsReproducesTheSingleRankLoss) {
  const std::string one = (dir_ / "one.jsonl").string(), eight = (dir_ / "pp.jsonl").string();
  auto r = herd::testing::run_herd(run_args(one));
  ASSERT_EQ(r.status, 0) << r.err;
  r = herd::testing::run_herd(run_args(eight) + " --tp 2 --cp 2 --pp 2 --n 2");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto a = losses_of(one), b = losses_of(eight);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "step " << i + 1;
}

TEST_F(DistCli, Tp2Cp2Dp2AsThreadsReproducesTheSingleRankLoss) {
  const std::string one = (dir_ / "one.jsonl").string(), eight = (dir_ / "eight.jsonl").string();
  auto r = herd::testing::run_herd(run_args(one));
  ASSERT_EQ(r.status, 0) << r.err;
  r = herd::testing::run_herd(run_args(eight) + " --tp 2 --cp 2 --dp 2");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto a = losses_of(one), b = losses_of(eight);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "step " << i + 1;
}

// One checkpoint format: `herd generate` reads the checkpoint of a one-rank, a TP2 x DP2 and a TP2 x CP2
// x PP2 run (each tensor assembled from the writers' shards) and continues the same prompt with the same
// greedy tokens, as the layouts' weights agree within fp32 parity.
TEST_F(DistCli, GenerateReadsTheCheckpointOfEveryLayout) {
  std::vector<std::vector<int>> outputs;
  for (const std::string layout : {"", "--tp 2 --dp 2", "--tp 2 --cp 2 --pp 2 --n 2"}) {
    SCOPED_TRACE(layout);
    const std::string ckpt = (dir_ / ("ckpt" + std::to_string(outputs.size()))).string();
    auto r = herd::testing::run_herd(run_args((dir_ / "g.jsonl").string()) + " " + layout +
                                     " --checkpoint.dir=" + ckpt + " --checkpoint.every=5");
    ASSERT_EQ(r.status, 0) << r.err;
    r = herd::testing::run_herd("generate --checkpoint " + ckpt +
                                " --prompt-ids 1,2,3 --greedy --max-tokens 12 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const Json j = Json::parse(r.out);
    ASSERT_EQ(j["ids"].size(), 12u) << r.out;
    outputs.push_back(j["ids"].get<std::vector<int>>());
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_EQ(outputs[2], outputs[0]);
  auto r = herd::testing::run_herd("generate --checkpoint " + (dir_ / "ckpt0").string() + " --prompt-ids 1,x");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--prompt-ids: 'x' is not a token id in [0, 64)"), std::string::npos) << r.err;
}

// One layout: the line `herd plan` prints for its winner trains as it is under `herd train`.
TEST_F(DistCli, ThePlansLayoutLineTrainsAsItIs) {
  auto p = herd::testing::run_herd("plan --model " + (dir_ / "config.json").string() +
                                   " --cluster local-cpu --gpus 4 --seq-len 16 --global-batch 8 --precision fp32");
  ASSERT_EQ(p.status, 0) << p.err;
  const std::size_t at = p.out.find("layout #1: ");
  ASSERT_NE(at, std::string::npos) << p.out;
  const std::string line = p.out.substr(at + 11, p.out.find('\n', at) - at - 11);
  EXPECT_NE(line.find("--microbatch-size "), std::string::npos) << line;
  EXPECT_NE(line.find("--global-batch 8"), std::string::npos) << line;
  const std::string metrics = (dir_ / "plan.jsonl").string();
  auto r = herd::testing::run_herd(run_args(metrics) + " " + line);
  ASSERT_EQ(r.status, 0) << line << "\n" << r.err;
  EXPECT_EQ(losses_of(metrics).size(), 5u);
  const std::string one = (dir_ / "plan_one.jsonl").string();
  r = herd::testing::run_herd(run_args(one));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto a = losses_of(one), b = losses_of(metrics);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << line << " step " << i + 1;
}

// --precision on the command line: fp64 trains the same curve as fp32 (to fp32's rounding), bf16 a
// curve within bf16's (docs/precision.md), and bf16 on TP2 x DP2 the one-rank bf16 curve within the
// layout bound of bf16_parity_test.cpp.
TEST_F(DistCli, PrecisionFlagTrainsFp64AndBf16OnAnyLayout) {
  const std::string fp32 = (dir_ / "p32.jsonl").string(), fp64 = (dir_ / "p64.jsonl").string();
  const std::string bf16 = (dir_ / "p16.jsonl").string(), bf16x4 = (dir_ / "p16x4.jsonl").string();
  for (const auto& [metrics, flags] : {std::pair{fp32, std::string()},
                                       {fp64, std::string(" --precision fp64")},
                                       {bf16, std::string(" --precision bf16")},
                                       {bf16x4, std::string(" --precision bf16 --tp 2 --dp 2")}}) {
    auto r = herd::testing::run_herd(run_args(metrics) + flags);
    ASSERT_EQ(r.status, 0) << flags << ": " << r.err;
  }
  const auto a = losses_of(fp32), d = losses_of(fp64), h = losses_of(bf16), h4 = losses_of(bf16x4);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(d.size(), 5u);
  ASSERT_EQ(h.size(), 5u);
  ASSERT_EQ(h4.size(), 5u);
  double gap = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(d[i], a[i], 1e-5 * a[i]) << "fp64 step " << i + 1;
    EXPECT_NEAR(h[i], a[i], 1e-2 * a[i]) << "bf16 step " << i + 1;
    EXPECT_NEAR(h4[i], h[i], 1e-3 * h[i]) << "bf16 tp2 dp2 step " << i + 1;
    gap = std::max(gap, std::fabs(h[i] - a[i]) / a[i]);
  }
  EXPECT_GT(gap, 1e-6) << "the bf16 curve is the fp32 one: bf16 did not run";
}

TEST_F(DistCli, MpiBackendOutsideMpirunIsRefused) {
  auto r = train("--dp 2 --backend mpi");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("not started by mpirun"), std::string::npos) << r.err;
}

// A partial set of torchrun's variables is one line naming them, before any data is read.
TEST_F(DistCli, PartialLauncherVariablesAreRefusedNamingThem) {
  const std::string args = "train --data.dir=" + dir_.string() + " --model.vocab=64 --data.seq_len=64 --dp 2";
  auto r = herd::testing::run_herd_env("env RANK=0", args);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("RANK=0 without WORLD_SIZE: torchrun sets both"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(DistCli, ParallelKeysComeFromTheConfigFileAndFlagsWin) {
  const std::string cfg = (dir_ / "run.json").string();
  std::ofstream(cfg) << R"({"parallel": {"tp": 2, "dp": 2, "sequence_parallel": false}})";
  auto r = herd::testing::run_herd("train " + cfg + " --dp 4 --print-config");
  ASSERT_EQ(r.status, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["parallel"]["tp"], 2);
  EXPECT_EQ(j["parallel"]["dp"], 4);
  EXPECT_EQ(j["parallel"]["sequence_parallel"], false);
}

TEST_F(DistCli, Tp2Dp2AsThreadsReproducesTheSingleRankLoss) {
  const std::string one = (dir_ / "one.jsonl").string(), four = (dir_ / "four.jsonl").string();
  auto r = herd::testing::run_herd(run_args(one));
  ASSERT_EQ(r.status, 0) << r.err;
  r = herd::testing::run_herd(run_args(four) + " --tp 2 --dp 2");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto a = losses_of(one), b = losses_of(four);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "step " << i + 1;
}

TEST_F(DistCli, AStalledRankStopsHerdTrainNamingIt) {
  const std::string dump = (dir_ / "dumps").string();
  fs::create_directories(dump);
  auto r = herd::testing::run_herd(run_args((dir_ / "m.jsonl").string()) +
                                   " --dp 2 --parallel.comm_timeout_s=2 --fault.hang_rank=1 --fault.hang_step=2 "
                                   "--fault.hang_seconds=6 --diagnostics.dir=" +
                                   dump);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("global ranks 1 had not joined it"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("flight recorders dumped"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::is_empty(dump));
}

#if HERD_HAVE_GLOO
// torchrun --no-python and srun without PMIx start herd's ranks as processes that talk over gloo
// (tests/comm/process/spawn_ranks.sh sets each launcher's variables as it does): TP2 x DP2 as 4 processes
// gives the one-rank run's losses.
TEST_F(DistCli, Tp2Dp2UnderTorchrunAndSrunWithoutPmixReproducesTheSingleRankLoss) {
  const std::string one = (dir_ / "one.jsonl").string();
  auto r = herd::testing::run_herd(run_args(one));
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string spawn = std::string(HERD_SOURCE_DIR) + "/tests/comm/process/spawn_ranks.sh ";
  for (const std::string launcher : {"", "--slurm "}) {
    const std::string name = launcher.empty() ? "torchrun" : "srun";
    const std::string metrics = (dir_ / (name + ".jsonl")).string(), log = (dir_ / (name + ".log")).string();
    const std::string cmd = spawn + launcher + "4 " + std::string(HERD_BINARY) + " " + run_args(metrics) +
                            " --tp 2 --dp 2 --parallel.rendezvous_dir=" + (dir_ / "meet").string() + " > " + log +
                            " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << herd::testing::slurp(log);
    const auto a = losses_of(one), b = losses_of(metrics);
    ASSERT_EQ(b.size(), 5u) << herd::testing::slurp(log);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << name << " step " << i + 1;
    const std::string out = herd::testing::slurp(log);
    EXPECT_NE(out.find("training 4 ranks as processes over gloo; " +
                       std::string(launcher.empty() ? "torchrun" : "srun without PMIx")),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("tp2 x cp1 x pp1 x dp2"), std::string::npos) << out;
  }
  // Rank 0 removed the meeting place of each start once every rank was connected.
  EXPECT_TRUE(fs::is_empty(dir_ / "meet"));
}

// Processes started by hand with the launch.* settings (no launcher variables) train as one job.
TEST_F(DistCli, ProcessesStartedByHandWithLaunchSettingsReproduceTheSingleRankLoss) {
  const std::string one = (dir_ / "one.jsonl").string(), two = (dir_ / "hand.jsonl").string();
  auto r = herd::testing::run_herd(run_args(one));
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string common = std::string(HERD_BINARY) + " " + run_args(two) +
                             " --dp 2 --launch.world_size=2 --launch.master_addr=127.0.0.1 --launch.master_port=" +
                             std::to_string(20000 + ::getpid() % 20000) +
                             " --parallel.rendezvous_dir=" + (dir_ / "meet").string();
  const std::string log = (dir_ / "hand.log").string();
  const std::string cmd = common + " --launch.rank=1 > " + log + ".1 2>&1 & p=$!; " + common + " --launch.rank=0 > " +
                          log + " 2>&1; s=$?; wait $p || s=1; exit $s";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << herd::testing::slurp(log) << herd::testing::slurp(log + ".1");
  const auto a = losses_of(one), b = losses_of(two);
  ASSERT_EQ(b.size(), 5u) << herd::testing::slurp(log);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "step " << i + 1;
  EXPECT_NE(herd::testing::slurp(log).find("training 2 ranks as processes over gloo; the launch.* settings"),
            std::string::npos)
      << herd::testing::slurp(log);
}

// A gloo rank that fails alone (rank 0 cannot open the metrics file) prints its error and ends its process;
// its peer's collective then fails on the closed connection instead of waiting out the 300 s timeout.
TEST_F(DistCli, AGlooRankThatFailsAloneEndsTheJobAtOnce) {
  const fs::path not_a_dir = dir_ / "a_file";
  std::ofstream(not_a_dir) << "x";
  const std::string metrics = (not_a_dir / "m.jsonl").string(), log = (dir_ / "g.log").string();
  const std::string cmd =
      std::string(HERD_SOURCE_DIR) + "/tests/comm/process/spawn_ranks.sh 2 " + std::string(HERD_BINARY) + " " +
      run_args(metrics) +
      " --tp 2 --parallel.comm_timeout_s=300 --parallel.rendezvous_dir=" + (dir_ / "meet").string() + " > " + log +
      " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string out = herd::testing::slurp(log);
  EXPECT_NE(out.find("rank 0: train.metrics_file '" + metrics + "': cannot open for writing"), std::string::npos)
      << out;
  EXPECT_NE(out.find("ending the job"), std::string::npos) << out;
  EXPECT_NE(out.find("the connection to global rank 0 failed"), std::string::npos) << out;
  EXPECT_EQ(out.find("timeout after"), std::string::npos) << "the peer waited out its collective: " << out;
}
#endif

#if HERD_HAVE_MPI
TEST_F(DistCli, Tp2Dp2UnderMpirunReproducesTheSingleRankLoss) {
  const std::string one = (dir_ / "one.jsonl").string(), four = (dir_ / "mpi.jsonl").string();
  auto r = herd::testing::run_herd(run_args(one));
  ASSERT_EQ(r.status, 0) << r.err;
  // OpenMPI's own allocations outlive MPI_Finalize; under LeakSanitizer they would fail the run.
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 mpirun --allow-run-as-root --oversubscribe "
      "--bind-to none -np 4 " +
      std::string(HERD_BINARY) + " " + run_args(four) + " --tp 2 --dp 2 > " + (dir_ / "mpi.log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << herd::testing::slurp((dir_ / "mpi.log").string());
  const auto a = losses_of(one), b = losses_of(four);
  ASSERT_EQ(b.size(), 5u) << herd::testing::slurp((dir_ / "mpi.log").string());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "step " << i + 1;
  EXPECT_NE(herd::testing::slurp((dir_ / "mpi.log").string()).find("tp2 x cp1 x pp1 x dp2"), std::string::npos);
}

// A rank that fails alone (here rank 0, the only one that opens the metrics file) while its peer waits
// for it in a collective: its error is printed at once and the job ends, instead of the peer waiting out
// the collective timeout and aborting the job before rank 0's error is ever printed.
TEST_F(DistCli, AnMpiRankThatFailsAloneShowsItsErrorAndEndsTheJobAtOnce) {
  const fs::path not_a_dir = dir_ / "a_file";
  std::ofstream(not_a_dir) << "x";
  const std::string metrics = (not_a_dir / "m.jsonl").string();
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 mpirun --allow-run-as-root --oversubscribe "
      "--bind-to none -np 2 " +
      std::string(HERD_BINARY) + " " + run_args(metrics) + " --tp 2 --parallel.comm_timeout_s=300 > " +
      (dir_ / "f.log").string() + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = herd::testing::slurp((dir_ / "f.log").string());
  EXPECT_NE(log.find("rank 0: train.metrics_file '" + metrics + "': cannot open for writing"), std::string::npos)
      << log;
  EXPECT_NE(log.find("ending the job"), std::string::npos) << log;
  EXPECT_EQ(log.find("timeout after"), std::string::npos) << "the peer waited out its collective: " << log;
  EXPECT_LT(wall, 150.0) << log;  // far under the peer's 300 s timeout: tells the two ends apart on any host
}

TEST_F(DistCli, AWorldOfTheWrongSizeIsRefusedUnderMpirun) {
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 mpirun --allow-run-as-root --oversubscribe "
      "--bind-to none -np 2 " +
      std::string(HERD_BINARY) + " " + run_args((dir_ / "w.jsonl").string()) + " --tp 2 --pp 2 > " +
      (dir_ / "w.log").string() + " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string log = herd::testing::slurp((dir_ / "w.log").string());
  EXPECT_NE(log.find("tp (2) x cp (1) x pp (2) x dp (1) = 4 ranks, but the job has 2"), std::string::npos) << log;
}
#endif

}  // namespace
}  // namespace herd::train
