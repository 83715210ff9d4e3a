// Straggler detection: the rule (comm/stragglers.h) and the step's split (train/step/straggler_monitor.h) on
// constructed figures, and the trainer's live watch on real TP2 x DP2 and TP2 x PP2 jobs, ranks as
// threads. The live jobs train for real (the per-rank split, its gather on the control all-reduce, the
// windows, the three-checks-in-a-row rule, the metrics' `stragglers`), but every rank's step figures
// come from a scripted step clock (ScriptedJob below), so what the tests assert cannot depend on the
// host's speed or scheduler: a rank slowed 1.5x (fault.slow_rank, computing) from step 9 is flagged as
// slow at step 21 (the first check whose window's median is a slowed step is step 15's; three in a row
// end at step 21) and no other rank is; a rank stalled 3x (fault.slow_mode=stall) is flagged as stalled; a
// clean run with jitter, a burst over two checks and a rank queued for a core three times its compute
// flags nothing. How often the measured clocks of a real shared host flag a clean run is measured by
// bench/diagnosis/stragglers.py (docs/reliability.md#stragglers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "herd/comm/stragglers.h"
#include "herd/train/job/job.h"
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

// The measured clock (the trainer's): fault.slow_rank's extra work is busy time, its sleep a stall. Lower
// bounds only: the thread computes at least the CPU time asked (its own CPU clock says when to stop) and
// is off the CPU at least the time it sleeps, however loaded the host.
TEST(StragglerSplit, TheMeasuredClockCountsExtraComputeAsBusyAndASleepAsAStall) {
  const std::unique_ptr<StepClock> clock = measured_step_clock(nullptr);
  clock->start_step();
  clock->compute_for(0.020);
  comm::FlightRecorder::StepTimes t = clock->split(3);
  EXPECT_EQ(t.step, 3);
  EXPECT_GE(t.busy_s, 0.020);
  EXPECT_EQ(t.wait_s, 0.0);  // no communicator: no collectives
  clock->start_step();
  clock->stall_for(0.030);
  t = clock->split(4);
  EXPECT_GE(t.stall_s + t.queued_s, 0.029);  // the sleep is off the CPU (a wake-up may queue for a core)
  EXPECT_LT(t.busy_s, 0.030);
}

// A job's scripted step figures. Rank r computes busy[r] seconds a step, times a jitter of up to 5% that
// depends on the rank and the step only; the fault's extra work (StepClock::compute_for, stall_for) adds
// to the step it is done in. A rank waits in collectives 1 ms a step plus what the others' extra work of
// the step before cost over its own: the fault runs after a step's last collective, so its peers wait
// for it at the next step's first. Optional noise a real shared host has: a rank queued for a core
// `queued` x its compute in every step, and a burst of steps in which a rank computes `burst_factor` x.
struct Script {
  std::vector<double> busy = {};
  int queued_rank = -1;
  double queued = 0;
  int burst_rank = -1;
  std::int64_t burst_from = 0, burst_steps = 0;
  double burst_factor = 1;
};

class ScriptedJob {
 public:
  explicit ScriptedJob(Script s) : script_(std::move(s)) {}
  int ranks() const { return static_cast<int>(script_.busy.size()); }

  // The extra seconds of work `rank` did in `step` (StepClock::compute_for and stall_for).
  double extra_of(int rank, std::int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = extra_.find({rank, step});
    return it == extra_.end() ? 0.0 : it->second;
  }
  double busy_of(int rank, std::int64_t step) const {
    const Script& s = script_;
    const auto h = static_cast<std::uint64_t>(rank * 7919 + step * 104729) * 0x9E3779B97F4A7C15ull;
    const double jitter = 0.05 * (static_cast<double>(h >> 11) / static_cast<double>(1ull << 53) * 2 - 1);
    const bool bursting = rank == s.burst_rank && step >= s.burst_from && step < s.burst_from + s.burst_steps;
    return s.busy[static_cast<std::size_t>(rank)] * (1 + jitter) * (bursting ? s.burst_factor : 1);
  }
  double queued_of(int rank, double busy_s) const {
    return rank == script_.queued_rank ? script_.queued * busy_s : 0.0;
  }

  class Clock final : public StepClock {
   public:
    Clock(ScriptedJob& job, int rank) : job_(job), rank_(rank) {}
    void start_step() override {
      ++step_;
      busy_extra_ = stall_extra_ = 0;
    }
    comm::FlightRecorder::StepTimes split(std::int64_t step) override {
      comm::FlightRecorder::StepTimes t;
      t.step = step;
      t.busy_s = job_.busy_of(rank_, step_) + busy_extra_;
      t.stall_s = stall_extra_;
      t.queued_s = job_.queued_of(rank_, t.busy_s);
      double most = 0;
      for (int r = 0; r < job_.ranks(); ++r) most = std::max(most, job_.extra_of(r, step_ - 1));
      t.wait_s = 0.001 + most - job_.extra_of(rank_, step_ - 1);
      return t;
    }
    void compute_for(double cpu_s) override {
      busy_extra_ += cpu_s;
      job_.add_extra(rank_, step_, cpu_s);
    }
    void stall_for(double s) override {
      stall_extra_ += s;
      job_.add_extra(rank_, step_, s);
    }

   private:
    ScriptedJob& job_;
    int rank_;
    std::int64_t step_ = 0;  // the step since start_step: the job's steps, counted from 1
    double busy_extra_ = 0, stall_extra_ = 0;
  };

  std::function<std::unique_ptr<StepClock>(int)> clocks() {
    return [this](int rank) { return std::make_unique<Clock>(*this, rank); };
  }

 private:
  void add_extra(int rank, std::int64_t step, double s) {
    std::lock_guard<std::mutex> lock(mu_);
    extra_[{rank, step}] += s;
  }

  Script script_;
  std::mutex mu_;
  std::map<std::pair<int, std::int64_t>, double> extra_;  // (rank, step) -> its extra seconds of that step
};

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

// The job on its measured clocks (job == nullptr) or on `job`'s scripted ones.
JobResult<float> run_job_of(const TrainConfig& c, ScriptedJob* job = nullptr) {
  JobResult<float> out;
  out.quiet = true;
  if (job != nullptr) out.step_clock = job->clocks();
  const Status s =
      run_local_job<float>(c, herd::test_models::straggler_llama(), {testing::parity_docs(200, 3), nullptr}, &out);
  EXPECT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(static_cast<std::int64_t>(out.history.size()), c.train.steps);
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

// fault.slow_rank asked `rank`'s clock for (factor - 1) x its step's compute in every step from `from`,
// and no other rank's, nor before.
void expect_extra_work(ScriptedJob& job, int rank, double factor, std::int64_t from, std::int64_t steps) {
  for (std::int64_t k = 1; k <= steps; ++k) {
    for (int r = 0; r < job.ranks(); ++r) {
      const double want = r == rank && k >= from ? (factor - 1) * job.busy_of(r, k) : 0.0;
      EXPECT_NEAR(job.extra_of(r, k), want, 1e-12) << "rank " << r << ", step " << k;
    }
  }
}

std::int64_t checks_of(const JobResult<float>& out) {
  std::int64_t checks = 0;
  for (const StepRecord& r : out.history) checks += r.straggler_check ? 1 : 0;
  return checks;
}

// Checks every 3 steps (diagnostics.straggler_every) once a window of 10 steps is measured: steps 12, 15,
// ..., 30, the check of step s judging steps s - 10 to s - 1.
constexpr std::int64_t kChecksIn30Steps = 7;
// Slowed from step 9: step 15's window (5 to 14) is the first whose median is a slowed step (6 of 10;
// no check's window holds 5 slowed and 5 not, where the jitter would decide); with step 18's and 21's,
// three checks in a row.
constexpr std::int64_t kFlaggedAt = 21;

TEST(StragglerWatch, ARankSlowedOneAndAHalfTimesIsFlaggedWithin20StepsOnTp2Dp2) {
  TrainConfig c = straggler_config(30, 2, 1, 2);
  c.fault.slow_rank = 2;
  c.fault.slow_factor = 1.5;
  c.fault.slow_from_step = 9;
  ScriptedJob job({.busy = {0.010, 0.010, 0.010, 0.010}});
  const JobResult<float> out = run_job_of(c, &job);
  expect_extra_work(job, 2, 1.5, 9, 30);
  std::set<int> flagged;
  EXPECT_EQ(first_flag(out, 2, &flagged), kFlaggedAt);
  EXPECT_EQ(flagged, std::set<int>{2});
  EXPECT_EQ(checks_of(out), kChecksIn30Steps);
  for (const StepRecord& r : out.history) {
    if (r.step < kFlaggedAt) continue;
    ASSERT_EQ(r.stragglers.size(), r.straggler_check ? 1u : 0u) << "step " << r.step;
    for (const Straggler& s : r.stragglers) {
      EXPECT_EQ(s.rank, 2);
      EXPECT_EQ(s.kind, StragglerKind::kSlow);
      EXPECT_NEAR(s.slowdown, 1.5, 0.17) << comm::describe_straggler(s);  // each busy time within 5%
      EXPECT_EQ(s.waited_on_by, (std::vector<int>{0, 1, 3})) << comm::describe_straggler(s);
    }
  }
}

// fault.slow_mode=stall: rank 1 is off the CPU twice its compute time after each step from step 9 (a
// rank stopped two thirds of the time), its CPU time its peers'. Flagged as stalled, with the stall as
// what it lost.
TEST(StragglerWatch, ARankStalledTwoThirdsOfTheTimeIsFlaggedAsStalled) {
  TrainConfig c = straggler_config(30, 2, 1, 2);
  c.fault.slow_rank = 1;
  c.fault.slow_factor = 3;
  c.fault.slow_mode = "stall";
  c.fault.slow_from_step = 9;
  ScriptedJob job({.busy = {0.010, 0.010, 0.010, 0.010}});
  const JobResult<float> out = run_job_of(c, &job);
  expect_extra_work(job, 1, 3, 9, 30);
  std::set<int> flagged;
  EXPECT_EQ(first_flag(out, 1, &flagged), kFlaggedAt);
  EXPECT_EQ(flagged, std::set<int>{1});
  for (const StepRecord& r : out.history) {
    for (const Straggler& s : r.stragglers) {
      EXPECT_EQ(s.kind, StragglerKind::kStalled) << comm::describe_straggler(s);
      EXPECT_NEAR(s.slowdown, 3.0, 0.35) << comm::describe_straggler(s);
      EXPECT_GT(s.stall_s, s.busy_s) << comm::describe_straggler(s);
      EXPECT_EQ(s.waited_on_by, (std::vector<int>{0, 2, 3})) << comm::describe_straggler(s);
    }
  }
}

// Stages {0, 1} and {2, 3}; stage 1 (the output layer) computes 1.6x stage 0. Rank 3 slowed 1.5x is
// flagged against rank 2 alone; rank 2, slower than stage 0 by more than the threshold, is not.
TEST(StragglerWatch, ASlowRankOfTheSecondPipelineStageIsFlaggedAgainstItsStage) {
  TrainConfig c = straggler_config(30, 2, 2, 1);
  c.parallel.microbatch = 2;
  c.fault.slow_rank = 3;
  c.fault.slow_factor = 1.5;
  c.fault.slow_from_step = 9;
  ScriptedJob job({.busy = {0.010, 0.010, 0.016, 0.016}});
  const JobResult<float> out = run_job_of(c, &job);
  std::set<int> flagged;
  EXPECT_EQ(first_flag(out, 3, &flagged), kFlaggedAt);
  EXPECT_EQ(flagged, std::set<int>{3});
  for (const StepRecord& r : out.history) {
    for (const Straggler& s : r.stragglers) {
      EXPECT_EQ(s.kind, StragglerKind::kSlow);
      EXPECT_NEAR(s.peers_busy_s, 0.016, 0.016 * 0.06);  // rank 2's, not stage 0's
    }
  }
}

// What a shared host does to healthy ranks, none of it a straggler: jitter; rank 0 queued for a core
// three times as long as it computes (not judged); rank 1 computing twice as long for 5 steps (31 to
// 35), which puts its median over the threshold at the two checks whose window holds all five (steps
// 36 and 39: a median of five steps at 1x and five at 2x is at least 1.36x the peers'), not three in a
// row. The same burst over 8 steps (three such checks) is flagged: the
// clean run is clean by the rule, not for want of figures.
TEST(StragglerWatch, ACleanRunWithJitterQueuesAndATwoCheckBurstFlagsNothing) {
  const TrainConfig c = straggler_config(48, 2, 1, 2);
  ScriptedJob job({.busy = {0.010, 0.010, 0.010, 0.010},
                   .queued_rank = 0,
                   .queued = 3,
                   .burst_rank = 1,
                   .burst_from = 31,
                   .burst_steps = 5,
                   .burst_factor = 2});
  JobResult<float> out = run_job_of(c, &job);
  EXPECT_EQ(checks_of(out), 13);  // steps 12, 15, ..., 48
  std::string flags;
  for (const StepRecord& r : out.history) {
    for (const Straggler& s : r.stragglers) {
      std::ostringstream o;
      o << "step " << r.step << ": " << comm::describe_straggler(s) << "\n";
      flags += o.str();
    }
  }
  EXPECT_TRUE(flags.empty()) << flags;

  ScriptedJob longer({.busy = {0.010, 0.010, 0.010, 0.010},
                      .queued_rank = 0,
                      .queued = 3,
                      .burst_rank = 1,
                      .burst_from = 31,
                      .burst_steps = 8,
                      .burst_factor = 2});
  out = run_job_of(c, &longer);
  std::set<int> flagged;
  EXPECT_EQ(first_flag(out, 1, &flagged), 42);  // the checks of steps 36, 39 and 42
  EXPECT_EQ(flagged, std::set<int>{1});
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
