// The reliability projection: Young's and Daly's intervals against hand computations, the wall-time
// shares against a Monte Carlo run of the same job (Poisson interruptions, restarts, asynchronous
// writes), checkpoint bytes against an independent parameter count, ETT falling with scale, and the
// Llama 3 405B job above the paper's 90%. Elastic recovery: its shares against a discrete-event
// simulation of the policy and against its limits, and the survivors' layout from the planner.
#include "herd/planner/reliability.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "herd/model/params.h"

namespace herd::planner {
namespace {

Layout layout_of(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp) {
  Layout l;
  l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp;
  return l;
}

Estimate estimate_405b(std::int64_t dp) {
  const model::LlamaConfig cfg = *model::preset("llama3-405b");
  const topology::Cluster cluster = *topology::cluster_preset("llama3-h100");
  // Weak scaling: 16 sequences per data-parallel rank, as in the paper's 2,048 on 128.
  const TrainingSpec t{8192, 16 * dp, Precision::kBF16};
  Result<Estimate> e = estimate(cfg, cluster, t, layout_of(8, 1, 16, dp), 8 * 16 * dp);
  EXPECT_TRUE(e.ok()) << e.error().message();
  return *e;
}

TEST(Reliability, YoungAndDalyIntervalsMatchHandComputation) {
  // The paper's rate on its 16,384 GPUs: 54 days / 419 interruptions = 4,665,600 s / 419 = 11,135.08 s.
  const double m = job_mtbf_s(kLlama3FailureRatePerHour, 16384);
  EXPECT_NEAR(m, 11135.08, 0.01);
  // Young: sqrt(2 x 3 s x 10,000 s) = sqrt(60,000) = 244.949 s.
  EXPECT_NEAR(young_interval_s(3.0, 10000.0), 244.949, 1e-3);
  // Daly: 244.949 x (1 + sqrt(3 / 20,000) / 3 + 3 / 180,000) - 3
  //     = 244.949 x (1 + 0.0040825 + 0.0000167) - 3 = 242.953 s.
  EXPECT_NEAR(daly_interval_s(3.0, 10000.0), 242.953, 1e-3);
  // A checkpoint longer than 2 M: checkpoint every M (Daly's second branch).
  EXPECT_DOUBLE_EQ(daly_interval_s(300.0, 100.0), 100.0);
  // 10 s steps: 242.95 s -> 24 steps; at least one step; at least an asynchronous write's duration.
  EXPECT_EQ(*checkpoint_interval_steps(10.0, 3.0, 10000.0), 24);
  EXPECT_EQ(*checkpoint_interval_steps(1000.0, 3.0, 10000.0), 1);
  EXPECT_EQ(*checkpoint_interval_steps(10.0, 3.0, 10000.0, 401.0), 41);
  for (auto bad : {checkpoint_interval_steps(0.0, 3.0, 1e4), checkpoint_interval_steps(1.0, -1.0, 1e4),
                   checkpoint_interval_steps(1.0, 3.0, std::nan("")), checkpoint_interval_steps(1.0, 3.0, INFINITY),
                   checkpoint_interval_steps(1.0, 3.0, 1e4, -5)}) {
    EXPECT_FALSE(bad.ok());
  }
  EXPECT_NE(checkpoint_interval_steps(0.0, 3.0, 1e4).error().message().find("step_s"), std::string::npos);
}

// The job as a sequence of events: segments of interval + stall, Poisson interruptions, a restart that
// is itself retried when interrupted, and a checkpoint that becomes durable `lag` after its segment.
double simulated_ett(double interval, double stall, double lag, double restart, double mtbf, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(1.0 / mtbf);
  const double w = interval + stall;
  double wall = 0, kept = 0;
  while (wall < 4e4 * mtbf) {
    const double fail = wall + gap(rng);
    double t = wall, last_done = -1e300;
    std::int64_t done = 0;
    while (t + w <= fail) t += w, ++done, last_done = t;
    if (done > 0 && last_done + lag > fail) --done;  // the newest checkpoint was not on storage yet
    kept += static_cast<double>(done);
    wall = fail;
    for (double g = gap(rng); g < restart; g = gap(rng)) wall += g;
    wall += restart;
  }
  return kept * interval / wall;
}

TEST(Reliability, WallTimeSharesMatchASimulatedJob) {
  struct Case {
    double interval, stall, lag, restart, mtbf;
  };
  for (const Case& c : {Case{100, 5, 0, 60, 1000}, Case{100, 1, 50, 60, 1000}, Case{300, 20, 0, 600, 2000}}) {
    const TimeShares t = expected_time_shares(c.interval, c.stall, c.lag, c.restart, c.mtbf);
    EXPECT_NEAR(t.productive + t.checkpoint + t.lost_work + t.restart, 1.0, 1e-12);
    const double sim = simulated_ett(c.interval, c.stall, c.lag, c.restart, c.mtbf, 42);
    EXPECT_NEAR(t.productive, sim, 0.005) << c.interval << " " << c.lag << " " << c.restart;
  }
  // No interruptions in sight: only the checkpoint stalls remain.
  const TimeShares calm = expected_time_shares(100, 5, 0, 600, 1e15);
  EXPECT_NEAR(calm.productive, 100.0 / 105.0, 1e-9);
  EXPECT_NEAR(calm.restart, 0.0, 1e-9);
  // Daly's interval is the optimum of this model: halving or doubling it loses ETT.
  const double best = daly_interval_s(5, 1000);
  const double at = expected_time_shares(best, 5, 0, 60, 1000).productive;
  EXPECT_GT(at, expected_time_shares(best / 2, 5, 0, 60, 1000).productive);
  EXPECT_GT(at, expected_time_shares(best * 2, 5, 0, 60, 1000).productive);
}

TEST(Reliability, CheckpointHoldsWeightsMasterAndMomentsOnce) {
  // bf16 weights (2) + fp32 master (4) + AdamW m and v (8) = 14 bytes per parameter of the model,
  // whatever the data-parallel degree; counted independently from model::model_params. The RMSNorm
  // weights (2 per layer + the final one, 16,384 each) are whole on every one of the 8 TP ranks, and
  // each writes its own: 7 extra copies.
  const model::LlamaConfig cfg = *model::preset("llama3-405b");
  const double params = static_cast<double>(model::model_params(cfg).total());
  const double norms = (2.0 * 126 + 1) * 16384;
  for (std::int64_t dp : {16, 128}) {
    const Estimate e = estimate_405b(dp);
    EXPECT_NEAR(e.checkpoint_total_bytes, 14.0 * (params + 7 * norms), 1e-9 * params) << dp;
    EXPECT_NEAR(e.checkpoint.master * 2, e.checkpoint.moments, 1.0);
    EXPECT_NEAR(e.checkpoint.weights * 2, e.checkpoint.master, 1.0);
    // The largest share: at least the average, and no more than the heaviest pipeline rank allows.
    const double avg = e.checkpoint_total_bytes / static_cast<double>(e.gpus);
    EXPECT_GE(e.checkpoint.total(), avg * (1 - 1e-9));
    EXPECT_LT(e.checkpoint.total(), avg * 1.2);
  }
}

TEST(Reliability, Llama3_405bKeepsOverNinetyPercent) {
  const topology::Cluster cluster = *topology::cluster_preset("llama3-h100");
  const Reliability r = project_reliability(estimate_405b(128), cluster, ReliabilitySpec{});
  EXPECT_EQ(r.accelerators, 16384);
  EXPECT_NEAR(r.interruptions_per_day, 419.0 / 54.0, 1e-9);
  EXPECT_EQ(r.storage_bw_source, "cluster llama3-h100");
  // 405e9 x 14 bytes at 2 TB/s: about 2.8 s.
  EXPECT_NEAR(r.write_s, r.checkpoint_total_bytes / 2000e9, 1e-9);
  EXPECT_GT(r.write_s, 2.5);
  EXPECT_LT(r.write_s, 3.2);
  EXPECT_GT(r.sync.shares.productive, 0.90);
  EXPECT_GT(r.async.shares.productive, r.sync.shares.productive);
  EXPECT_GE(r.async.interval_s, r.async.durable_lag_s);
  EXPECT_NEAR(r.sync.interval_s, r.sync.daly_interval_s, r.step_s / 2 + 1e-9);
  // The restart is the largest loss at this scale (7.8 restarts x 10 min a day).
  EXPECT_GT(r.sync.shares.restart, r.sync.shares.lost_work);
  EXPECT_GT(r.sync.shares.restart, r.sync.shares.checkpoint);
  // A slower storage needs rarer, dearer checkpoints; a faster restart buys back its time.
  ReliabilitySpec slow;
  slow.checkpoint_bw_gb_per_s = 20;
  const Reliability rs = project_reliability(estimate_405b(128), cluster, slow);
  EXPECT_EQ(rs.storage_bw_source, "--checkpoint-bandwidth");
  EXPECT_GT(rs.sync.interval_s, r.sync.interval_s);
  EXPECT_LT(rs.sync.shares.productive, r.sync.shares.productive);
  ReliabilitySpec quick;
  quick.restart_s = 60;
  EXPECT_GT(project_reliability(estimate_405b(128), cluster, quick).sync.shares.productive, 0.97);
}

TEST(Reliability, EttFallsWithScale) {
  const topology::Cluster cluster = *topology::cluster_preset("llama3-h100");
  double prev_sync = 1, prev_async = 1;
  for (std::int64_t dp : {8, 16, 32, 64, 128, 192}) {
    const Reliability r = project_reliability(estimate_405b(dp), cluster, ReliabilitySpec{});
    EXPECT_LT(r.sync.shares.productive, prev_sync) << dp;
    EXPECT_LT(r.async.shares.productive, prev_async) << dp;
    prev_sync = r.sync.shares.productive;
    prev_async = r.async.shares.productive;
  }
  // Beyond the cluster, the formulas alone: 1K to 128K accelerators at the 405B checkpoint's stall.
  double prev = 1;
  for (double g = 1024; g <= 131072; g *= 2) {
    const double m = job_mtbf_s(kLlama3FailureRatePerHour, g);
    const double ett = expected_time_shares(daly_interval_s(2.8, m), 2.8, 0, 600, m).productive;
    EXPECT_LT(ett, prev) << g;
    prev = ett;
  }
}

// Elastic recovery as a sequence of events, written from the policy rather than from the formula:
// full-layout segments until an interruption; an elastic restart (started over at each interruption,
// at the degraded rate until the node is back, then at the full one), degraded segments until the
// repair (exponential, mean `repair`, from the interruption that lost the node; nodes lost meanwhile
// come back with it); after the repair the segment in progress is finished (an interruption first
// starts a new degraded period), its write awaited and a planned restart made (started over at each
// interruption). The newest checkpoint is lost with its segment when an interruption comes within
// its durable lag. Returns the ETT and its standard error over the cycles that start each time the
// full layout resumes (the delta method on the ratio of sums).
struct SimulatedEtt {
  double ett = 0, stderr_ = 0;
  std::int64_t cycles = 0;
};

SimulatedEtt simulate_elastic(const CheckpointedRun& f, const CheckpointedRun& d, double slowdown, double restart,
                              double regrow, double repair, double horizon, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto exp_gap = [&](double mean) { return std::exponential_distribution<double>(1.0 / mean)(rng); };
  const double wf = f.interval_s + f.stall_s, wd = d.interval_s + d.stall_s;
  double t = 0, cycle_start = 0, cycle_useful = 0;
  std::vector<double> useful, length;
  double repair_at = 0;  // when the node of the current degraded period is back
  enum class Phase { kFull, kRestart, kDegraded, kRegrow } phase = Phase::kFull;
  // Runs segments of `w` from t until `stop_at` or an interruption at `fail`; returns the segments kept.
  auto run_segments = [&](double w, double lag, double fail, double stop_at, bool* failed) {
    std::int64_t done = 0;
    double last = -1e300;
    while (t + w <= fail && t < stop_at) t += w, ++done, last = t;
    *failed = t + w > fail && t < stop_at;
    if (*failed) {
      if (done > 0 && last + lag > fail) --done;  // the newest checkpoint was not on storage yet
      t = fail;
    }
    return done;
  };
  while (t < horizon) {
    switch (phase) {
      case Phase::kFull: {
        useful.push_back(cycle_useful), length.push_back(t - cycle_start);
        cycle_start = t, cycle_useful = 0;
        bool failed = false;
        cycle_useful += f.interval_s *
                        static_cast<double>(run_segments(wf, f.durable_lag_s, t + exp_gap(f.mtbf_s), 1e300, &failed));
        repair_at = t + exp_gap(repair);
        phase = Phase::kRestart;
        break;
      }
      case Phase::kRestart: {
        // The interruption clock runs at the degraded rate until the repair, then at the full one.
        double fail = t < repair_at ? t + exp_gap(d.mtbf_s) : t + exp_gap(f.mtbf_s);
        if (t < repair_at && fail > repair_at) fail = repair_at + exp_gap(f.mtbf_s);
        if (fail < t + restart) {
          t = fail;
        } else {
          t += restart;
          phase = t >= repair_at ? Phase::kFull : Phase::kDegraded;
        }
        break;
      }
      case Phase::kDegraded: {
        const double fail = t + exp_gap(d.mtbf_s);
        bool failed = false;
        // Segments until the repair; the one in progress at the repair is finished.
        cycle_useful +=
            d.interval_s / slowdown * static_cast<double>(run_segments(wd, d.durable_lag_s, fail, repair_at, &failed));
        if (failed) {
          if (t >= repair_at) repair_at = t + exp_gap(repair);  // a new degraded period
          phase = Phase::kRestart;
        } else {
          phase = Phase::kRegrow;
        }
        break;
      }
      case Phase::kRegrow: {
        const double g = d.durable_lag_s + regrow;
        for (double gap = exp_gap(f.mtbf_s); gap < g; gap = exp_gap(f.mtbf_s)) t += gap;
        t += g;
        phase = Phase::kFull;
        break;
      }
    }
  }
  double u = 0, l = 0;
  for (std::size_t i = 1; i < useful.size(); ++i) u += useful[i], l += length[i];
  SimulatedEtt out;
  out.ett = u / l;
  out.cycles = static_cast<std::int64_t>(useful.size()) - 1;
  double var = 0;
  for (std::size_t i = 1; i < useful.size(); ++i) var += std::pow(useful[i] - out.ett * length[i], 2);
  out.stderr_ = std::sqrt(var) / l;
  return out;
}

TEST(ElasticRecovery, SharesMatchASimulatedPolicy) {
  struct Case {
    CheckpointedRun full, degraded;
    double slowdown, restart, regrow, repair;
  };
  const Case cases[] = {
      // Repairs shorter than the time between interruptions, a 25% slower degraded layout.
      {{100, 5, 0, 1000}, {110, 5, 0, 1150}, 1.25, 60, 60, 500},
      // Long repairs: mostly degraded, several interruptions per degraded period.
      {{100, 5, 0, 1000}, {120, 6, 0, 1300}, 1.4, 30, 90, 5000},
      // Asynchronous writes (a durable lag), a slow restart, short repairs.
      {{80, 1, 20, 800}, {90, 1, 25, 900}, 1.1, 200, 100, 300},
      // Restarts and segments long against the interruptions.
      {{300, 20, 0, 900}, {350, 20, 0, 1000}, 1.6, 250, 250, 700},
  };
  std::uint64_t seed = 7;
  for (const Case& c : cases) {
    const ElasticShares t = elastic_time_shares(c.full, c.degraded, c.slowdown, c.restart, c.regrow, c.repair);
    EXPECT_NEAR(t.productive + t.degraded + t.checkpoint + t.lost_work + t.restart + t.regrow, 1.0, 1e-12);
    const SimulatedEtt sim =
        simulate_elastic(c.full, c.degraded, c.slowdown, c.restart, c.regrow, c.repair, 3e4 * c.full.mtbf_s, ++seed);
    EXPECT_GT(sim.cycles, 4000);
    EXPECT_LT(sim.stderr_, 0.002);
    // Four standard errors: a 6e-5 chance for a correct formula (over 100 times as many cycles the
    // four cases agree within 1.2 standard errors).
    EXPECT_NEAR(t.productive, sim.ett, 4 * sim.stderr_) << c.repair << " " << c.slowdown;
  }
}

TEST(ElasticRecovery, LimitsAreTheKnownPolicies) {
  const CheckpointedRun full{100, 5, 2, 1000}, degraded{115, 5, 3, 1200};
  const double restart = 90;
  const TimeShares replacement = expected_time_shares(100, 5, 2, restart, 1000);
  // The node back at once: replacement with the elastic restart, exactly (repair 0) and in the limit.
  EXPECT_DOUBLE_EQ(elastic_time_shares(full, degraded, 1.3, restart, 60, 0).productive, replacement.productive);
  const ElasticShares quick = elastic_time_shares(full, degraded, 1.3, restart, 60, 1e-7);
  EXPECT_NEAR(quick.productive, replacement.productive, 1e-6);
  EXPECT_NEAR(quick.restart, replacement.restart, 1e-6);
  EXPECT_NEAR(quick.degraded + quick.regrow + quick.on_degraded, 0, 1e-6);
  // Never repaired: the degraded job's own ETT at its throughput.
  const TimeShares on_survivors = expected_time_shares(115, 5, 3, restart, 1200);
  const ElasticShares never = elastic_time_shares(full, degraded, 1.3, restart, 60, 1e12);
  EXPECT_NEAR(never.productive, on_survivors.productive / 1.3, 1e-6);
  EXPECT_NEAR(never.degraded, on_survivors.productive * (1 - 1 / 1.3), 1e-6);
  EXPECT_NEAR(never.on_degraded, on_survivors.productive + on_survivors.checkpoint + on_survivors.lost_work, 1e-6);
  // A degraded layout as fast as the full one, failing as often, and a free grow back (no write to
  // wait for, no restart): elastic recovery is then replacement with the elastic restart, whatever
  // the repair time.
  const CheckpointedRun sync{100, 5, 0, 1000};
  for (double repair : {1.0, 300.0, 1000.0, 1e5}) {
    const ElasticShares same = elastic_time_shares(sync, sync, 1.0, restart, 0, repair);
    const TimeShares r = expected_time_shares(100, 5, 0, restart, 1000);
    EXPECT_NEAR(same.productive, r.productive, 1e-12) << repair;
    EXPECT_NEAR(same.restart, r.restart, 1e-12) << repair;
    EXPECT_NEAR(same.degraded + same.regrow, 0, 1e-12) << repair;
  }
  // A slower degraded layout and a dearer grow back cost ETT; a quicker restart gains it.
  const ElasticShares base = elastic_time_shares(full, degraded, 1.3, restart, 60, 2000);
  EXPECT_LT(elastic_time_shares(full, degraded, 1.6, restart, 60, 2000).productive, base.productive);
  EXPECT_LT(elastic_time_shares(full, degraded, 1.3, restart, 600, 2000).productive, base.productive);
  EXPECT_GT(elastic_time_shares(full, degraded, 1.3, 10, 60, 2000).productive, base.productive);
}

TEST(ElasticRecovery, Llama3_405bSurvivorsRunAPlannedLayout) {
  const model::LlamaConfig cfg = *model::preset("llama3-405b");
  const topology::Cluster cluster = *topology::cluster_preset("llama3-h100");
  const TrainingSpec t{8192, 2048, Precision::kBF16};
  const DegradedLayout d = degraded_layout(cfg, cluster, t, 16384, SearchSpace{});
  EXPECT_EQ(d.node_accelerators, 8);
  EXPECT_EQ(d.survivors, 16376);
  ASSERT_TRUE(d.best) << d.why_none;
  // On at most the survivors, keeping the 2,048 sequences, within memory.
  EXPECT_LE(d.best->gpus, 16376);
  EXPECT_EQ(d.best->layout.gpus(), d.best->gpus);
  EXPECT_TRUE(d.best->fits());
  EXPECT_EQ(t.global_batch % (d.best->layout.dp * d.best->layout.microbatch), 0);
  // The job as `herd estimate` lays it out: the paper's degrees, the knobs chosen by the search.
  Result<FamilyChoice> chosen = choose_layout(cfg, cluster, t, layout_of(8, 1, 16, 128), 16384, SearchSpace{});
  ASSERT_TRUE(chosen.ok()) << chosen.error().message();
  const Estimate& full = chosen->best;
  const Reliability r = project_reliability(full, cluster, ReliabilitySpec{}, &d);
  ASSERT_TRUE(r.elastic);
  const ElasticRecovery& e = *r.elastic;
  ASSERT_TRUE(e.possible);
  EXPECT_EQ(e.accelerators, d.best->gpus);
  EXPECT_NEAR(e.slowdown, d.best->time.step_s / full.time.step_s, 1e-12);
  EXPECT_GT(e.slowdown, 1.0);  // fewer accelerators, the same batch
  EXPECT_NEAR(e.mtbf_s, job_mtbf_s(kLlama3FailureRatePerHour, static_cast<double>(e.accelerators)), 1e-6);
  EXPECT_GT(e.shares.productive, 0.8);
  EXPECT_LT(e.shares.productive, 1.0);
  // One node: nothing survives.
  const DegradedLayout none = degraded_layout(cfg, cluster, t, 8, SearchSpace{});
  EXPECT_FALSE(none.best);
  EXPECT_NE(none.why_none.find("none survive"), std::string::npos) << none.why_none;
}

TEST(Reliability, BadSpecsNameTheFlag) {
  struct Case {
    ReliabilitySpec spec;
    const char* flag;
  };
  std::vector<Case> cases(10);
  cases[0].spec.failure_rate_per_hour = -1, cases[0].flag = "--failure-rate";
  cases[1].spec.failure_rate_per_hour = std::nan(""), cases[1].flag = "--failure-rate";
  cases[2].spec.checkpoint_bw_gb_per_s = -3, cases[2].flag = "--checkpoint-bandwidth";
  cases[3].spec.snapshot_bw_gb_per_s = 0, cases[3].flag = "--snapshot-bandwidth";
  cases[4].spec.restart_s = -1, cases[4].flag = "--restart-s";
  cases[5].spec.restart_s = INFINITY, cases[5].flag = "--restart-s";
  cases[6].spec.elastic_restart_s = -1, cases[6].flag = "--elastic-restart-s";
  cases[7].spec.elastic_restart_s = std::nan(""), cases[7].flag = "--elastic-restart-s";
  cases[8].spec.repair_s = -60, cases[8].flag = "--repair-s";
  cases[9].spec.repair_s = INFINITY, cases[9].flag = "--repair-s";
  for (const Case& c : cases) {
    Status s = validate(c.spec);
    ASSERT_FALSE(s.ok()) << c.flag;
    EXPECT_EQ(s.error().message().rfind(c.flag, 0), 0u) << s.error().message();
  }
  EXPECT_TRUE(validate(ReliabilitySpec{}).ok());
  EXPECT_FALSE(parse_checkpoint_mode("lazy").ok());
  EXPECT_EQ(*parse_checkpoint_mode("sync"), CheckpointMode::kSync);
}

}  // namespace
}  // namespace herd::planner
