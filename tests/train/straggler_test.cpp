// Straggler detection: the rule (comm/stragglers.h) and the step's split (train/straggler_monitor.h) on
// constructed figures, and the trainer's live watch on real TP2 x DP2 and TP2 x PP2 jobs, ranks as
// threads: a rank slowed 1.5x (fault.slow_rank, computing) is flagged as slow within 20 steps of its
// slowdown (three checks in a row over the threshold, every 3 steps: 11 to 14 steps when nothing hides
// it) and no other rank is; a rank stalled 3x (fault.slow_mode=stall: asleep) is flagged as stalled; a
// clean 200-step run flags nothing. These runs are on a shared, noisy 2-core machine on purpose: the CPU
// time (not the wall time) and the medians over a window are what keep a descheduled thread from being
// a straggler. The false-positive rate over repeated runs is measured by bench/diagnosis/stragglers.py
// (docs/reliability.md#stragglers).
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
using comm::StragglerKind;

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
  const std::vector<Straggler> s = comm::find_stragglers(ranks);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 2);
  EXPECT_EQ(s[0].host, "h1");
  EXPECT_EQ(s[0].kind, StragglerKind::kSlow);
  EXPECT_NEAR(s[0].slowdown, 0.030 / 0.020, 1e-12);  // the median of the other three: 20 ms
  EXPECT_DOUBLE_EQ(s[0].peers_busy_s, 0.020);
  EXPECT_EQ(s[0].waited_on_by, (std::vector<int>{0, 1, 3}));
  const std::string line = comm::describe_straggler(s[0]);
  EXPECT_NE(line.find("rank 2 (h1) is 1.50x slower than its peers' median (30.000 ms vs 20.000 ms of CPU a step)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("ranks 0,1,3 wait on it"), std::string::npos) << line;
  const Json j = comm::straggler_json(s[0]);
  EXPECT_EQ(j["rank"].get<int>(), 2);
  EXPECT_EQ(j["kind"].get<std::string>(), "slow");
  EXPECT_NEAR(j["slowdown"].get<double>(), 1.5, 1e-12);
}

// A rank that computes as fast as its peers but is off the CPU as long again between (stopped, asleep) is
// stalled; one that only waits longer for a core (queued: the host's scheduling) is not judged for it.
TEST(StragglerRule, ARankStoppedAsLongAsItComputesIsStalledAndQueuedTimeIsNotHeldAgainstIt) {
  std::vector<RankStepTimes> ranks = ranks_with({0.020, 0.021, 0.020, 0.019});
  ranks[1].stall_s = 0.025;  // (21 + 25) / 20 = 2.3x the peers' own time
  ranks[3].queued_s = 0.200;
  for (int r : {0, 2, 3}) ranks[static_cast<std::size_t>(r)].wait_s = 0.030;
  std::vector<Straggler> s = comm::find_stragglers(ranks);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rank, 1);
  EXPECT_EQ(s[0].kind, StragglerKind::kStalled);
  EXPECT_NEAR(s[0].slowdown, 0.046 / 0.020, 1e-12);
  EXPECT_DOUBLE_EQ(s[0].peers_own_s, 0.020);
  EXPECT_EQ(s[0].waited_on_by, (std::vector<int>{0, 2, 3}));
  const std::string line = comm::describe_straggler(s[0]);
  EXPECT_NE(line.find("rank 1 (h0) is stalled: 2.30x its peers' time (21.000 ms computing + 25.000 ms stopped, "
                      "asleep or blocked a step vs 20.000 ms)"),
            std::string::npos)
      << line;
  EXPECT_EQ(comm::straggler_json(s[0])["kind"].get<std::string>(), "stalled");
  // Stalled 1.9x: under the stall threshold (a shared host's lock convoys reach that at single checks).
  ranks[1].stall_s = 0.017;
  EXPECT_TRUE(comm::find_stragglers(ranks).empty());
  // The thresholds are the caller's.
  s = comm::find_stragglers(ranks, {.slow = 1.3, .stalled = 1.5});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].kind, StragglerKind::kStalled);
}

// The step's split: CPU time outside collectives is busy, the run-queue time outside them is queued, the
// rest of the wall time outside them a stall.
TEST(StragglerSplit, TheWallTimeOutsideCollectivesIsBusyQueuedAndStalled) {
  const measure::ThreadClock start{.cpu_s = 10.0, .queued_s = 3.0}, end{.cpu_s = 10.050, .queued_s = 3.030};
  const measure::TimedCommunicator::Totals c0{.wall_s = 1.0, .cpu_s = 0.5, .queued_s = 0.2};
  const measure::TimedCommunicator::Totals c1{.wall_s = 1.040, .cpu_s = 0.510, .queued_s = 0.210};
  // 100 ms of wall: 40 ms in collectives, 60 ms outside: 40 ms of CPU (50 - 10 inside), 20 ms queued
  // (30 - 10 inside), so 0 ms stalled.
  comm::FlightRecorder::StepTimes t = split_step(7, 0.100, start, end, c0, c1);
  EXPECT_EQ(t.step, 7);
  EXPECT_NEAR(t.wait_s, 0.040, 1e-12);
  EXPECT_NEAR(t.busy_s, 0.040, 1e-12);
  EXPECT_NEAR(t.queued_s, 0.020, 1e-12);
  EXPECT_NEAR(t.stall_s, 0.0, 1e-12);
  t = split_step(7, 0.130, start, end, c0, c1);  // 30 ms more of wall time, neither on a CPU nor queued
  EXPECT_NEAR(t.stall_s, 0.030, 1e-12);
}

TEST(StragglerRule, UnderTheThresholdOrWithoutPeersNothingIsFlagged) {
  EXPECT_TRUE(comm::find_stragglers(ranks_with({0.020, 0.021, 0.025, 0.019})).empty());  // 1.25x
  // Two ranks: each is compared with the other alone, so a 1.5x rank stands out and the fast one does not.
  const std::vector<Straggler> two = comm::find_stragglers(ranks_with({0.030, 0.020}));
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].rank, 0);
  // A stage of one rank has no peers: a pure pipeline cannot tell a slow host from a heavier stage.
  EXPECT_TRUE(comm::find_stragglers(ranks_with({0.020, 0.040}, {0, 1})).empty());
  // No measurement (busy 0) is not a fast rank that makes the others look slow.
  EXPECT_TRUE(comm::find_stragglers(ranks_with({0.0, 0.020, 0.021})).empty());
}

TEST(StragglerRule, PipelineStagesAreComparedWithinThemselves) {
  // Stage 1 (ranks 2, 3, 6, 7: the output layer) is 1.6x heavier than stage 0: nobody straggles.
  const std::vector<int> stages = {0, 0, 1, 1, 0, 0, 1, 1};
  EXPECT_TRUE(comm::find_stragglers(ranks_with({10, 10.5, 16, 16.2, 9.8, 10, 16.1, 15.9}, stages)).empty());
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
      EXPECT_EQ(s.kind, StragglerKind::kSlow);
      EXPECT_GT(s.slowdown, 1.3);
      EXPECT_FALSE(s.waited_on_by.empty());  // its peers wait for it in their collectives
    }
  }
}

// fault.slow_mode=stall: rank 1 sleeps twice its compute time after each step from step 10 (a rank
// stopped two thirds of the time), its CPU time its peers'. Flagged as stalled within 20 steps, with
// the stall as what it lost.
TEST(StragglerWatch, ARankStalledTwoThirdsOfTheTimeIsFlaggedAsStalled) {
  TrainConfig c = straggler_config(40, 2, 1, 2);
  c.fault.slow_rank = 1;
  c.fault.slow_factor = 3;
  c.fault.slow_mode = "stall";
  c.fault.slow_from_step = 10;
  std::set<int> flagged;
  JobResult<float> out;
  const std::int64_t at = flag_step_within_two_runs(c, 1, &flagged, &out);
  ASSERT_GT(at, 0) << "rank 1 was never flagged";
  EXPECT_EQ(flagged, std::set<int>{1});
  for (const StepRecord& r : out.history) {
    for (const Straggler& s : r.stragglers) {
      EXPECT_EQ(s.kind, StragglerKind::kStalled) << comm::describe_straggler(s);
      EXPECT_GT(s.stall_s, s.busy_s) << comm::describe_straggler(s);
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

// On this shared 2-core virtual machine the two cores do not always run at the same speed: CPU time for
// the same work was measured up to 1.33x apart between them for tens of steps, which the ranks on the
// slower core cannot tell from a slow host (bench/diagnosis: such an episode in about 1 of 30 clean runs,
// docs/reliability.md#stragglers). On a virtual machine whose neighbours take its cores' time (an
// Intel Xeon (Emerald Rapids): the same step's time moved 25% within minutes) such episodes come more often, and two
// clean runs in a row flagged in one CI run. So up to three clean runs are allowed; all three flagging
// fails the test. The rate itself is the bench's figure, not this test's.
TEST(StragglerWatch, ACleanTwoHundredStepRunFlagsNothing) {
  std::string earlier_flags;
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
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
    if (attempt + 1 < kAttempts) {
      earlier_flags += flags;
      std::cout << "clean run " << attempt + 1 << " flagged (the host's noise, see above):\n" << flags;
    } else {
      ADD_FAILURE() << kAttempts << " clean runs in a row flagged a straggler:\n" << earlier_flags << flags;
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
