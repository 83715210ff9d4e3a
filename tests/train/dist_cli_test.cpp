// `herd train --tp --dp` as a user runs it: layouts that do not fit the model or the batch, and a
// backend that cannot be used, are refused with one line and exit status 1 before any rank starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

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
  }
  void TearDown() override { fs::remove_all(dir_); }
  herd::testing::CliResult train(const std::string& args) {
    return herd::testing::run_herd("train data.dir=" + dir_.string() + " model.vocab=64 data.seq_len=64 " + args);
  }
  fs::path dir_;
};

TEST_F(DistCli, BadLayoutsAreRefusedWithTheNumbers) {
  auto r = train("--tp 3");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("parallel.tp (3) must divide the model's"), std::string::npos) << r.err;
  r = train("--dp 3 train.micro_batch=8");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("parallel.dp (3) must divide train.micro_batch (8)"), std::string::npos) << r.err;
  r = train("--tp 0");
  EXPECT_EQ(r.status, 2) << r.err;
}

TEST_F(DistCli, MpiBackendOutsideMpirunIsRefused) {
  auto r = train("--dp 2 --backend mpi");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("not started by mpirun"), std::string::npos) << r.err;
}

TEST_F(DistCli, ParallelKeysComeFromTheConfigFileAndFlagsWin) {
  const std::string cfg = (dir_ / "run.json").string();
  std::ofstream(cfg) << R"({"parallel": {"tp": 2, "dp": 2, "sequence_parallel": false}})";
  auto r = herd::testing::run_herd("train --config " + cfg + " --dp 4 --print-config");
  ASSERT_EQ(r.status, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["parallel"]["tp"], 2);
  EXPECT_EQ(j["parallel"]["dp"], 4);
  EXPECT_EQ(j["parallel"]["sequence_parallel"], false);
}

}  // namespace
}  // namespace herd::train
