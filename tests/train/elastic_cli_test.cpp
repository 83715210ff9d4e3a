// Elastic restarts as a user runs them: a TP2 x DP2 job that loses rank 3 for good at step 7
// (fault.lose_rank, fault.lose_step) under `herd train --max-restarts 2 --fault.elastic=true` (ranks as
// threads) and under `herd launch -np 4 --max-restarts 2 --elastic` (MPI processes) finishes its 12
// steps on fewer ranks: the supervisor names the lost rank and the re-planned layout, the metrics
// file's `layout` and `ranks` fields show the change after the resume, the ETT record counts the
// steps on fewer ranks, and the losses of steps 1-12 equal the one-rank run's within 1e-5 (fp32: the
// global batch and the data order do not change with the layout).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "cli/cli_runner.h"
#include "herd/core/json.h"
#include "herd/train/job/supervisor.h"
#include "train/parity_run_dir.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

class Elastic : public herd::testing::ParityRunDir {
 protected:
  Elastic() : ParityRunDir("herd_elastic_cli") {}

  // Train arguments of run `name`: the parity model, 12 steps of 8 sequences, a checkpoint every 3.
  std::string args(const std::string& name, const std::string& layout) {
    return "train " + data_and_model() +
           " --data.seq_len=16 --train.global_batch=8 --train.steps=12 --optim.lr=1e-2 --eval.every=0"
           " --generate.samples=0 --checkpoint.every=3 --fault.restart_backoff_s=0.05 --checkpoint.dir=" +
           (dir_ / name).string() + " --train.metrics_file=" + metrics_path(name) + " " + layout;
  }
  std::string metrics_path(const std::string& name) { return (dir_ / (name + ".jsonl")).string(); }

  struct Metrics {
    std::map<std::int64_t, double> loss;               // step -> loss of the last record of each step
    std::map<std::int64_t, std::string> layout;        // step -> the layout that ran it
    std::map<std::int64_t, std::int64_t> ranks;        // step -> its rank count
    std::map<std::int64_t, std::string> first_layout;  // step -> the layout that ran it first
    Json ett;                                          // the supervisor's closing record
  };
  Metrics metrics(const std::string& name) {
    Metrics m;
    std::ifstream in(metrics_path(name));
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line);
      if (!j.contains("step")) {
        m.ett = j;
        continue;
      }
      const auto step = j["step"].get<std::int64_t>();
      m.loss[step] = j["loss"].get<double>();
      m.layout[step] = j["layout"].get<std::string>();
      m.first_layout.emplace(step, m.layout[step]);
      m.ranks[step] = j["ranks"].get<std::int64_t>();
    }
    return m;
  }

  // The run that lost a rank against the uninterrupted one-rank run.
  void expect_elastic_run(const std::string& name, const std::string& out) {
    const Metrics got = metrics(name), ref = metrics("one_rank");
    ASSERT_EQ(ref.loss.size(), 12u);
    ASSERT_EQ(got.loss.size(), 12u) << out;
    for (const auto& [step, loss] : ref.loss) {
      EXPECT_LE(std::fabs(got.loss.at(step) - loss) / loss, 1e-5) << "step " << step;
    }
    // Steps 1-6 first ran on all four ranks; the job resumed from the newest checkpoint that was
    // complete when rank 3 was lost (step 6, or step 3 while step 6's asynchronous write was in flight)
    // on fewer ranks, which ran the rest: the last record of steps 7-12 is theirs.
    EXPECT_EQ(got.first_layout.at(1), "tp2 x cp1 x pp1 x dp2 (4 ranks)") << out;
    EXPECT_LT(got.ranks.at(7), 4) << out;
    EXPECT_EQ(got.ranks.at(12), got.ranks.at(7));
    EXPECT_NE(got.first_layout.at(1), got.layout.at(12));
    EXPECT_NE(out.find("rank 3 is lost for good"), std::string::npos) << out;
    EXPECT_NE(out.find("elastic: re-planned on 3 surviving rank(s): "), std::string::npos) << out;
    EXPECT_NE(out.find("elastic: 1 rank(s) lost for good; the next attempt runs on 3 of 4"), std::string::npos) << out;
    ASSERT_TRUE(got.ett.contains("degraded_steps")) << got.ett.dump();
    EXPECT_GE(got.ett["degraded_steps"].get<std::int64_t>(), 6);
    EXPECT_LE(got.ett["degraded_steps"].get<std::int64_t>(), 9);
    EXPECT_GT(got.ett["degraded_s"].get<double>(), 0);
    EXPECT_EQ(got.ett["exit"].get<int>(), 0);
  }

  void SetUp() override {
    ParityRunDir::SetUp();
    const auto r = herd::testing::run_herd(args("one_rank", ""));
    ASSERT_EQ(r.status, 0) << r.err;
  }
};

TEST_F(Elastic, ThreadRanksLosingOneFinishOnFewerRanksOnTheOneRankCurve) {
  const auto r = herd::testing::run_herd_combined(
      args("threads", "--tp 2 --dp 2") +
      " --max-restarts 2 --fault.elastic=true --fault.lose_rank=3 --fault.lose_step=7");
  ASSERT_EQ(r.status, 0) << r.out;
  expect_elastic_run("threads", r.out);
}

TEST_F(Elastic, MpiRanksUnderHerdLaunchLosingOneFinishOnFewerRanks) {
  const auto r =
      herd::testing::run_herd_combined("launch -np 4 --bind-to none --max-restarts 2 --elastic -- herd " +
                                       args("mpi", "--tp 2 --dp 2") + " --fault.lose_rank=3 --fault.lose_step=7");
  ASSERT_EQ(r.status, 0) << r.out;
  expect_elastic_run("mpi", r.out);
}

// Host discovery (herd launch --host-discovery): the script's hosts hold 4 slots, then 3 after rank 3
// is lost at step 7, then 4 again. The job shrinks, a rank killed at step 10 fails the smaller job, and
// the restart finds the hosts back: it runs steps 10-12 at the job's own TP2 x DP2 on 4 ranks, on the
// one-rank curve.
TEST_F(Elastic, MpiRanksUnderHerdLaunchGrowBackWhenTheHostsReturn) {
  const fs::path script = dir_ / "discover.sh", calls = dir_ / "calls";
  std::ofstream(script) << "n=$(cat " << calls.string() << " 2>/dev/null || echo 0); echo $((n + 1)) > "
                        << calls.string() << "\ncase $n in 1) echo localhost:3 ;; *) echo localhost:4 ;; esac\n";
  const auto r = herd::testing::run_herd_combined(
      "launch -np 4 --bind-to none --max-restarts 3 --elastic --host-discovery 'sh " + script.string() + "' -- herd " +
      args("grow", "--tp 2 --dp 2") +
      " --fault.lose_rank=3 --fault.lose_step=7 --fault.kill_rank=0 --fault.kill_step=10");
  ASSERT_EQ(r.status, 0) << r.out;
  const Metrics got = metrics("grow"), ref = metrics("one_rank");
  ASSERT_EQ(got.loss.size(), 12u) << r.out;
  for (const auto& [step, loss] : ref.loss) {
    EXPECT_LE(std::fabs(got.loss.at(step) - loss) / loss, 1e-5) << "step " << step;
  }
  EXPECT_EQ(herd::testing::slurp(calls.string()), "3\n") << r.out;
  EXPECT_EQ(got.first_layout.at(1), "tp2 x cp1 x pp1 x dp2 (4 ranks)") << r.out;
  // Some steps ran on fewer ranks (the records of the steps the grown-back attempt redid are its own).
  EXPECT_NE(r.out.find("elastic: re-planned on 3 surviving rank(s)"), std::string::npos) << r.out;
  EXPECT_GT(got.ett["degraded_steps"].get<std::int64_t>(), 0) << got.ett.dump();
  EXPECT_EQ(got.layout.at(12), "tp2 x cp1 x pp1 x dp2 (4 ranks)") << r.out;
  EXPECT_EQ(got.ranks.at(12), 4) << r.out;
  EXPECT_NE(r.out.find("elastic: 4 rank(s) available again"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("elastic: the hosts hold 4 slot(s) (localhost:4); attempt 2 runs on 4 of the job's 4"),
            std::string::npos)
      << r.out;
}

TEST_F(Elastic, HostDiscoveryThatFailsOrConflictsIsNamed) {
  auto r = herd::testing::run_herd_combined(
      "launch -np 2 --host localhost --host-discovery 'echo localhost:2' -- herd " + args("conflict", "--dp 2"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--host-discovery gives mpirun its hosts before every attempt; drop mpirun's --host"),
            std::string::npos)
      << r.out;
  r = herd::testing::run_herd_combined("launch -np 2 --bind-to none --host-discovery 'echo localhost:two' -- herd " +
                                       args("malformed", "--dp 2"));
  EXPECT_NE(r.out.find("host discovery failed (--host-discovery: 'localhost:two' is not host[:slots] with slots a "
                       "whole number >= 1); attempt 0 runs on the hosts of the command"),
            std::string::npos)
      << r.out;
}

TEST_F(Elastic, BadSettingsAreOneLine) {
  auto r = herd::testing::run_herd(args("bad", "--tp 2 --dp 2") + " --fault.elastic=true");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("fault.elastic restarts the job on the surviving ranks, but fault.max_restarts is 0"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(herd::testing::count_lines(r.err), 1) << r.err;
  r = herd::testing::run_herd(args("bad", "--tp 2 --dp 2") + " --fault.lose_rank=4 --fault.lose_step=2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("fault.lose_rank (4) is not a rank of the 4-rank job"), std::string::npos) << r.err;
  r = herd::testing::run_herd(args("bad", "--tp 2 --dp 2") + " --fault.lose_rank=1");
  EXPECT_NE(r.err.find("fault.lose_rank (1) needs fault.lose_step >= 1"), std::string::npos) << r.err;
}

TEST(ElasticLines, LostRanksAreReadFromTheFailedAttemptsLines) {
  EXPECT_EQ(lost_ranks({"herd: warning: fault.lose_rank: rank 3 is lost for good at step 7",
                        "herd train: error: rank 3: rank 3 is lost for good (fault.lose_rank) at step 7",
                        "rank 12 is lost for good", "a rank 5 exits at step 2"}),
            (std::vector<std::int64_t>{3, 12}));
  EXPECT_TRUE(lost_ranks({"rank is lost for good", "frank 2 is lost for good"}).empty());
}

}  // namespace
}  // namespace herd::train
