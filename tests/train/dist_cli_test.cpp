// `herd train --tp --dp` as a user runs it: layouts that do not fit the model or the batch, and a
// backend that cannot be used, are refused with one line and exit status 1 before any rank starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli_runner.h"
#include "herd/data/shard.h"
#include "train/dist_harness.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

class DistCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("herd_dist_cli" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ASSERT_TRUE(data::write_shard((dir_ / "train-00000.bin").string(), *testing::parity_docs(40, 1)).ok());
    ASSERT_TRUE(data::write_shard((dir_ / "val-00000.bin").string(), *testing::parity_docs(10, 2)).ok());
    std::ofstream((dir_ / "config.json").string()) << model::config_to_hf_json(testing::parity_model()).dump();
  }
  // A 5-step run of the parity model; returns the losses of the metrics file.
  std::vector<double> losses_of(const std::string& metrics) {
    std::vector<double> out;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line)["loss"].get<double>());
    return out;
  }
  std::string run_args(const std::string& metrics) {
    return "train --data.dir=" + dir_.string() + " --model.name=" + (dir_ / "config.json").string() +
           " --data.seq_len=16 --train.micro_batch=4 --train.grad_accum=2 --train.steps=5 --optim.lr=1e-2" +
           " --eval.every=0 --eval.batches=1 --generate.samples=0 --train.metrics_file=" + metrics;
  }
  void TearDown() override { fs::remove_all(dir_); }
  herd::testing::CliResult train(const std::string& args) {
    return herd::testing::run_herd("train --data.dir=" + dir_.string() + " --model.vocab=64 --data.seq_len=64 " + args);
  }
  fs::path dir_;
};

TEST_F(DistCli, BadLayoutsAreRefusedWithTheNumbers) {
  auto r = train("--tp 3");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("parallel.tp (3) must divide the model's"), std::string::npos) << r.err;
  r = train("--dp 3 --train.micro_batch=8");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("parallel.dp (3) must divide train.micro_batch (8)"), std::string::npos) << r.err;
  r = train("--tp 0");
  EXPECT_EQ(r.status, 2) << r.err;
}

TEST_F(DistCli, BadCpLayoutsAreRefusedWithTheNumbers) {
  auto r = train("--cp 3 --tp 2");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("data.seq_len (64) is not divisible by 2 x parallel.cp (6)"), std::string::npos) << r.err;
  r = train("--cp 2 --tp 4 --data.seq_len=20");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("parallel.tp (4) must divide the CP-local sequence data.seq_len / parallel.cp (20 / 2 = 10)"),
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
  refused("--pp 2 --v 2 --microbatches 3 --n 4", "n (4) must not exceed microbatches (3)");
  refused("--pp 2 --v 2 --microbatches 3 --schedule interleaved", "microbatches (3) must be a multiple of pp (2)");
  refused("--pp 2 --v 2 --schedule 1f1b", "v (2) must be 1");
  refused("--pp 4 --v 4 --microbatches 4", "layers (8) cannot fill pp*v = 4*4 = 16");
  refused("--v 2", "parallel.v (2) needs parallel.pp > 1");
  refused("--pp 2 --schedule zigzag", "parallel.pp_schedule");
  refused("--pp 2 --cp 4 --tp 2 --data.seq_len=20", "data.seq_len (20) is not divisible by 2 x parallel.cp (8)");
}

TEST_F(DistCli, Tp2Cp2Pp2AsThreadsReproducesTheSingleRankLoss) {
  const std::string one = (dir_ / "one.jsonl").string(), eight = (dir_ / "pp.jsonl").string();
  auto r = herd::testing::run_herd(run_args(one));
  ASSERT_EQ(r.status, 0) << r.err;
  r = herd::testing::run_herd(run_args(eight) + " --tp 2 --cp 2 --pp 2 --microbatches 2 --n 2");
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

TEST_F(DistCli, MpiBackendOutsideMpirunIsRefused) {
  auto r = train("--dp 2 --backend mpi");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("not started by mpirun"), std::string::npos) << r.err;
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
  ::setenv("HERD_FAULT", "stall:1:2:6", 1);
  auto r = herd::testing::run_herd(run_args((dir_ / "m.jsonl").string()) +
                                   " --dp 2 --parallel.comm_timeout_s=2 --comm.dump_dir=" + dump);
  ::unsetenv("HERD_FAULT");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("global ranks 1 had not joined it"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("flight recorders dumped"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::is_empty(dump));
}

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

TEST_F(DistCli, AWorldOfTheWrongSizeIsRefusedUnderMpirun) {
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 mpirun --allow-run-as-root --oversubscribe "
      "--bind-to none -np 2 " +
      std::string(HERD_BINARY) + " " + run_args((dir_ / "w.jsonl").string()) + " --tp 2 --pp 2 > " +
      (dir_ / "w.log").string() + " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string log = herd::testing::slurp((dir_ / "w.log").string());
  EXPECT_NE(
      log.find("parallel.tp (2) x parallel.cp (1) x parallel.pp (2) x parallel.dp (1) = 4 ranks, but the job has 2"),
      std::string::npos)
      << log;
}
#endif

}  // namespace
}  // namespace herd::train
