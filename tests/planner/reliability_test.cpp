// The reliability projection: Young's and Daly's intervals against hand computations, the wall-time
// shares against a Monte Carlo run of the same job (Poisson interruptions, restarts, asynchronous
// writes), checkpoint bytes against an independent parameter count, ETT falling with scale, and the
// Llama 3 405B job above the paper's 90%.
#include "herd/planner/reliability.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

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

TEST(Reliability, BadSpecsNameTheFlag) {
  struct Case {
    ReliabilitySpec spec;
    const char* flag;
  };
  std::vector<Case> cases(6);
  cases[0].spec.failure_rate_per_hour = -1, cases[0].flag = "--failure-rate";
  cases[1].spec.failure_rate_per_hour = std::nan(""), cases[1].flag = "--failure-rate";
  cases[2].spec.checkpoint_bw_gb_per_s = -3, cases[2].flag = "--checkpoint-bandwidth";
  cases[3].spec.snapshot_bw_gb_per_s = 0, cases[3].flag = "--snapshot-bandwidth";
  cases[4].spec.restart_s = -1, cases[4].flag = "--restart-s";
  cases[5].spec.restart_s = INFINITY, cases[5].flag = "--restart-s";
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
