// Straggler detection: the rule (comm/stragglers.h) on constructed figures, and the trainer's live
// watch (train/straggler_monitor.h) on real TP2 x DP2 and TP2 x PP2 jobs, ranks as threads: a rank slowed
// 1.5x (fault.slow_rank) is flagged within 20 steps of its slowdown (three checks in a row over
// the threshold, every 3 steps: 12 to 14 steps when nothing hides it) and no other rank is; a clean
// 200-step run flags nothing. These runs are on a shared, noisy 2-core machine on purpose: the medians
// over a window are what keep a descheduled step from being a straggler. The false-positive rate over
// repeated runs is measured by bench/diagnosis/stragglers.py (docs/reliability.md#stragglers).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <set>
#include <sstream>

#include "herd/comm/stragglers.h"
#include "herd/train/dist_model.h"
#include "train/dist_harness.h"

namespace herd::train {
namespace {

using comm::RankStepTimes;
using comm::Straggler;

std::vector<RankStepTimes> ranks_with(std::vector<double> busy, std::vector<int> stages = {}) {
  std::vector<RankStepTimes> out;
  for (std::size_t r = 0; r < busy.size(); ++r) {
    RankStepTimes t;
    t.rank = static_cast<int>(r);
    t.stage = stages.empty() ? 0 : stages[r];
    t.host = "h";
    t.host += std::to_string(r / 2);  // (not "h" + ...: GCC 12's -O3 -Wrestrict false positive)
    t.busy_s = busy[r];
    t.wait_s = 0.001;
    out.push_back(t);
  }
  return out;
}

TEST(StragglerRule, ARankBusierThanItsPeersByTheThresholdIsNamedWithItsSlowdown) {
  std::vector<RankStepTimes> ranks = ranks_with({0.020, 0.021, 0.030, 0.019});
  // The others wait for the straggler's extra 10 ms.
  for (int r : {0, 1, 3}) ranks[static_cast<std::size_t>(r)].wait_s = 0.0105;
  const std::vector<Straggler> s = comm::find_stragglers(ranks, 1.3);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 2);
  EXPECT_EQ(s[0].host, "h1");
  EXPECT_NEAR(s[0].slowdown, 0.030 / 0.020, 1e-12);  // the median of the other three: 20 ms
  EXPECT_DOUBLE_EQ(s[0].peers_busy_s, 0.020);
  EXPECT_EQ(s[0].waited_on_by, (std::vector<int>{0, 1, 3}));
  const std::string line = comm::describe_straggler(s[0]);
  EXPECT_NE(line.find("rank 2 (h1) is 1.50x busier"), std::string::npos) << line;
  EXPECT_NE(line.find("ranks 0,1,3 wait on it"), std::string::npos) << line;
  const Json j = comm::straggler_json(s[0]);
  EXPECT_EQ(j["rank"].get<int>(), 2);
  EXPECT_NEAR(j["slowdown"].get<double>(), 1.5, 1e-12);
}

TEST(StragglerRule, UnderTheThresholdOrWithoutPeersNothingIsFlagged) {
  EXPECT_TRUE(comm::find_stragglers(ranks_with({0.020, 0.021, 0.025, 0.019}), 1.3).empty());  // 1.25x
  // Two ranks: each is compared with the other alone, so a 1.5x rank stands out and the fast one does not.
  const std::vector<Straggler> two = comm::find_stragglers(ranks_with({0.030, 0.020}), 1.3);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].rank, 0);
  // A stage of one rank has no peers: a pure pipeline cannot tell a slow host from a heavier stage.
  EXPECT_TRUE(comm::find_stragglers(ranks_with({0.020, 0.040}, {0, 1}), 1.3).empty());
  // No measurement (busy 0) is not a fast rank that makes the others look slow.
  EXPECT_TRUE(comm::find_stragglers(ranks_with({0.0, 0.020, 0.021}), 1.3).empty());
}

TEST(StragglerRule, PipelineStagesAreComparedWithinThemselves) {
  // Stage 1 (ranks 2, 3, 6, 7: the output layer) is 1.6x heavier than stage 0: nobody straggles.
  const std::vector<int> stages = {0, 0, 1, 1, 0, 0, 1, 1};
  EXPECT_TRUE(comm::find_stragglers(ranks_with({10, 10.5, 16, 16.2, 9.8, 10, 16.1, 15.9}, stages), 1.3).empty());
  // Rank 6 is 1.5x its stage's peers: flagged, although stage 0's ranks are far faster than it anyway.
  const std::vector<Straggler> s = comm::find_stragglers(ranks_with({10, 10.5, 16, 16.2, 9.8, 10, 24, 15.9}, stages));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 6);
  EXPECT_NEAR(s[0].slowdown, 24.0 / 16.0, 1e-12);
}

TrainConfig straggler_config(std::int64_t steps, std::int64_t tp, std::int64_t pp, std::int64_t dp) {
  TrainConfig c = testing::parity_config(steps);
  c.data.seq_len = 64;
  c.train.global_batch = 8;
  c.schedule.warmup_steps = 5;
  c.optim.lr = 3e-3;
  testing::set_layout(c, tp, 1, pp, dp);
  c.train.threads = 1;
  return c;
}

JobResult<float> run_job_of(const TrainConfig& c) {
  JobResult<float> out;
  out.quiet = true;
  const Status s =
      run_local_job<float>(c, herd::test_models::straggler_llama(), {testing::parity_docs(200, 3), nullptr},
                           distributed_llama_factory<float>(), &out);
  EXPECT_TRUE(s.ok()) << s.error().message();
  return out;
}

// The step of the first check that flags `rank`; every rank any check flagged goes to `flagged`.
std::int64_t first_flag(const JobResult<float>& out, int rank, std::set<int>* flagged) {
  std::int64_t first = -1;
  for (const StepRecord& r : out.history) {
    for (const Straggler& s : r.stragglers) {
      flagged->insert(s.rank);
      if (s.rank == rank && first < 0) first = r.step;
    }
  }
  return first;
}

// A check that a descheduled burst pushes under the threshold restarts the run of three (the rule that
// keeps bursts from being flagged), so on this shared 2-core machine, with ctest running other tests
// beside this one, a slowed rank is now and then flagged a few steps after the bound (CI saw step 33 of
// 30 once). As for the clean run below, a second run is allowed when the first misses the bound; both
// missing it fails the test. The latency's distribution is bench/diagnosis's figure, not this test's.
std::int64_t flag_step_within_two_runs(const TrainConfig& c, int rank, std::set<int>* flagged, JobResult<float>* out) {
  std::int64_t at = -1;
  for (int attempt = 0; attempt < 2; ++attempt) {
    flagged->clear();
    *out = run_job_of(c);
    EXPECT_EQ(static_cast<std::int64_t>(out->history.size()), c.train.steps);
    at = first_flag(*out, rank, flagged);
    if (at > 0 && at <= c.fault.slow_from_step + 20) return at;
    std::cout << "run " << attempt + 1 << ": rank " << rank << " first flagged at step " << at << "\n";
  }
  return at;
}

TEST(StragglerWatch, ARankSlowedOneAndAHalfTimesIsFlaggedWithin20StepsOnTp2Dp2) {
  TrainConfig c = straggler_config(40, 2, 1, 2);
  c.fault.slow_rank = 2;
  c.fault.slow_factor = 1.5;
  c.fault.slow_from_step = 10;
  std::set<int> flagged;
  JobResult<float> out;
  const std::int64_t at = flag_step_within_two_runs(c, 2, &flagged, &out);
  ASSERT_GT(at, 0) << "rank 2 was never flagged";
  EXPECT_LE(at, c.fault.slow_from_step + 20);
  EXPECT_EQ(flagged, std::set<int>{2});
  // Checks happen every diagnostics.straggler_every steps once a window of steps is measured.
  ASSERT_EQ(out.history.size(), 40u);
  std::int64_t checks = 0;
  for (const StepRecord& r : out.history) checks += r.straggler_check ? 1 : 0;
  EXPECT_GE(checks, 5);
  for (const StepRecord& r : out.history) {
    for (const Straggler& s : r.stragglers) {
      EXPECT_EQ(s.rank, 2);
      EXPECT_GT(s.slowdown, 1.3);
      EXPECT_FALSE(s.waited_on_by.empty());  // its peers wait for it in their collectives
    }
  }
}

TEST(StragglerWatch, ASlowRankOfTheSecondPipelineStageIsFlaggedAgainstItsStage) {
  TrainConfig c = straggler_config(40, 2, 2, 1);  // stages {0, 1} and {2, 3}
  c.parallel.microbatch = 2;
  c.fault.slow_rank = 3;
  c.fault.slow_factor = 1.5;
  c.fault.slow_from_step = 10;
  std::set<int> flagged;
  JobResult<float> out;
  const std::int64_t at = flag_step_within_two_runs(c, 3, &flagged, &out);
  ASSERT_GT(at, 0) << "rank 3 was never flagged";
  EXPECT_LE(at, c.fault.slow_from_step + 20);
  EXPECT_EQ(flagged, std::set<int>{3});
}

// On this shared 2-core machine the host's scheduler can, rarely, starve a TP pair of threads for a
// second or two, which from inside the job is a real straggler (bench/diagnosis measured one such
// episode in 20 clean runs under load average 5). So a second clean run is allowed when the first flags
// something; both flagging fails the test. The rate itself is the bench's figure, not this test's.
TEST(StragglerWatch, ACleanTwoHundredStepRunFlagsNothing) {
  std::string first_run_flags;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const JobResult<float> out = run_job_of(straggler_config(200, 2, 1, 2));
    ASSERT_EQ(out.history.size(), 200u);
    std::int64_t checks = 0;
    std::string flags;
    for (const StepRecord& r : out.history) {
      checks += r.straggler_check ? 1 : 0;
      for (const Straggler& s : r.stragglers) {
        std::ostringstream o;
        o << "step " << r.step << ": " << comm::describe_straggler(s) << "\n";
        flags += o.str();
      }
    }
    EXPECT_GE(checks, 60);  // every 3 steps from step 12 (a full window of 10 measured steps)
    if (flags.empty()) return;
    if (attempt == 0) {
      first_run_flags = flags;
      std::cout << "first clean run flagged (the host's noise, see above):\n" << flags;
    } else {
      ADD_FAILURE() << "two clean runs in a row flagged a straggler:\n" << first_run_flags << flags;
    }
  }
}

TEST(StragglerWatch, OffForOneRankAndWhenDisabled) {
  TrainConfig c = straggler_config(20, 1, 1, 1);
  for (const StepRecord& r : run_job_of(c).history) EXPECT_FALSE(r.straggler_check);
  c = straggler_config(20, 2, 1, 2);
  c.diagnostics.straggler_every = 0;
  for (const StepRecord& r : run_job_of(c).history) EXPECT_FALSE(r.straggler_check);
}

}  // namespace
}  // namespace herd::train
