#include "herd/planner/reliability.h"

#include <algorithm>
#include <cmath>

#include "herd/core/format.h"

namespace herd::planner {

const char* checkpoint_mode_name(CheckpointMode m) { return m == CheckpointMode::kSync ? "sync" : "async"; }

Result<CheckpointMode> parse_checkpoint_mode(const std::string& s) {
  if (s == "sync") return CheckpointMode::kSync;
  if (s == "async") return CheckpointMode::kAsync;
  return make_error("--checkpoint-mode: expected sync or async, got '", s, "'");
}

Status validate(const ReliabilitySpec& s) {
  if (!(s.failure_rate_per_hour > 0) || !std::isfinite(s.failure_rate_per_hour)) {
    return make_error("--failure-rate: must be a positive number of interruptions per accelerator-hour, got ",
                      s.failure_rate_per_hour, "; the Llama 3 run's is ", format_sci(kLlama3FailureRatePerHour));
  }
  if (!(s.checkpoint_bw_gb_per_s >= 0) || !std::isfinite(s.checkpoint_bw_gb_per_s)) {
    return make_error("--checkpoint-bandwidth: must be a positive aggregate storage bandwidth in GB/s, got ",
                      s.checkpoint_bw_gb_per_s, " (e.g. 2000, Llama 3's 2 TB/s)");
  }
  if (!(s.snapshot_bw_gb_per_s > 0) || !std::isfinite(s.snapshot_bw_gb_per_s)) {
    return make_error("--snapshot-bandwidth: must be a positive device-to-host bandwidth per accelerator in GB/s, got ",
                      s.snapshot_bw_gb_per_s, " (e.g. 25)");
  }
  if (!(s.restart_s >= 0) || !std::isfinite(s.restart_s)) {
    return make_error("--restart-s: must be a non-negative number of seconds, got ", s.restart_s, " (e.g. 600)");
  }
  if (!(s.elastic_restart_s >= 0) || !std::isfinite(s.elastic_restart_s)) {
    return make_error("--elastic-restart-s: must be a non-negative number of seconds, got ", s.elastic_restart_s,
                      " (e.g. ", kDefaultElasticRestartS, ")");
  }
  if (!(s.repair_s >= 0) || !std::isfinite(s.repair_s)) {
    return make_error("--repair-s: must be a non-negative number of seconds (the mean time to repair a node), got ",
                      s.repair_s, " (e.g. ", kDefaultRepairS, ", 4 h)");
  }
  return Status::Ok();
}

double job_mtbf_s(double failure_rate_per_hour, double accelerators) {
  return 3600.0 / (failure_rate_per_hour * accelerators);
}

double young_interval_s(double stall_s, double mtbf_s) { return std::sqrt(2.0 * stall_s * mtbf_s); }

double daly_interval_s(double d, double m) {
  if (d >= 2.0 * m) return m;
  const double x = d / (2.0 * m);
  return std::sqrt(2.0 * d * m) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - d;
}

TimeShares expected_time_shares(double interval_s, double stall_s, double lag_s, double restart_s, double mtbf_s) {
  // One segment is interval_s of training and its checkpoint's stall, w seconds. With Poisson
  // interruptions at rate 1/M, the job runs M between interruptions and completes 1 / (e^(w/M) - 1)
  // segments in that time; the newest is lost with the rest when the interruption comes within the
  // durable lag L of its end (its checkpoint was not on storage yet), which happens with probability
  // 1 - e^(-L/M) at each completed segment: e^(-L/M) / (e^(w/M) - 1) segments are kept. Each
  // interruption costs a restart that is itself interrupted and retried: M (e^(R/M) - 1). Per kept
  // segment, f = (e^(w/M) - 1) e^(L/M) interruptions, M f of running (the segment and the lost work)
  // and f M (e^(R/M) - 1) of restarts; for L = 0 Daly's M e^(R/M) (e^(w/M) - 1) in all.
  const double w = interval_s + stall_s;
  const double interruptions = std::expm1(w / mtbf_s) * std::exp(lag_s / mtbf_s);
  const double lost = mtbf_s * interruptions - w;
  const double restart = interruptions * mtbf_s * std::expm1(restart_s / mtbf_s);
  const double total = w + lost + restart;
  TimeShares t;
  t.productive = interval_s / total;
  t.checkpoint = stall_s / total;
  t.lost_work = lost / total;
  t.restart = restart / total;
  return t;
}

namespace {

// (1 - e^(-k t)) / k: the expected time spent in [0, t) by a clock that an event of rate k stops
// (t at k = 0; k may be negative).
double window(double k, double t) { return k == 0 ? t : -std::expm1(-k * t) / k; }

// Expected time to complete t seconds that start over at each event of rate mu: M (e^(t/M) - 1).
double retried(double mu, double t) { return std::expm1(mu * t) / mu; }

}  // namespace

ElasticShares elastic_time_shares(const CheckpointedRun& full, const CheckpointedRun& degraded, double slowdown,
                                  double restart_s, double regrow_s, double repair_s) {
  // Renewal-reward over cycles that start when the full layout resumes training (at a checkpoint),
  // with the states and transitions of docs/reliability-planner.md, "Elastic recovery": F (full
  // training until an interruption), A0 (the elastic restart, node away), A1 (the rest of a restart
  // after the repair: it brings up the full layout), B0 (degraded training, node away), B1 (the
  // segment in progress at the repair, finished degraded), G (the grow back). Every quantity below is
  // the expected value per visit of a state.
  const double mu_f = 1.0 / full.mtbf_s, mu_d = 1.0 / degraded.mtbf_s;
  const double w_f = full.interval_s + full.stall_s, w_d = degraded.interval_s + degraded.stall_s;
  double prod_full = 0, prod_degraded = 0, checkpoint = 0, lost = 0, restart = 0, regrow = 0, on_degraded = 0;
  // F: segments of w_F until an interruption, M_F on average; e^(-L_F/M_F) / (e^(w_F/M_F) - 1) of
  // them are kept (expected_time_shares), the rest of the time is lost.
  const double k_f = std::exp(-full.durable_lag_s * mu_f) / std::expm1(w_f * mu_f);
  prod_full = full.interval_s * k_f;
  checkpoint = full.stall_s * k_f;
  lost = full.mtbf_s - w_f * k_f;
  if (repair_s == 0) {
    // The node is back at once: the restart brings up the full layout (replacement's restart).
    restart = retried(mu_f, restart_s);
  } else {
    const double rho = 1.0 / repair_s;
    // A0: attempts of restart_s, each ended by an interruption (mu_D: start over), the repair (rho: the
    // attempt goes on as A1) or its completion (B0).
    const double lambda = mu_d + rho;
    const double b = std::exp(-lambda * restart_s), not_b = -std::expm1(-lambda * restart_s);
    const double t_a0 = not_b / (rho + b * mu_d);
    const double p_b0 = lambda * b / (rho + b * mu_d);
    const double p_a1 = rho * not_b / (rho + b * mu_d);
    // A1: the attempt's remaining restart_s - e (e: its elapsed time at the repair, Exp(lambda) below
    // restart_s) at mu_F, started over in full at an interruption: E[1 - e^(-mu_F (R - e))] e^(mu_F R) / mu_F.
    double t_a1 = 0;
    if (not_b > 0) {
      const double completes = std::exp(-mu_f * restart_s) * lambda * window(lambda - mu_f, restart_s) / not_b;
      t_a1 = (1.0 - completes) * std::exp(mu_f * restart_s) / mu_f;
    }
    // B0: degraded segments of w_D until an interruption or the repair, whichever comes first
    // (Exp(nu)); k_d segments complete, and the one in progress has run e (Exp(nu) below w_D).
    const double nu = mu_d + rho;
    const double not_a = -std::expm1(-nu * w_d);
    const double k_d = std::exp(-nu * w_d) / not_a;
    const double q_repair = rho / nu;
    // B1 (after a repair): the segment's remaining w_D - e at mu_D; it completes with probability c and
    // then grows back, or is lost to an interruption that starts a new degraded period (A0).
    const double c = std::exp(-mu_d * w_d) * nu * window(rho, w_d) / not_a;
    const double t_b1 = (1.0 - c) / mu_d;  // E[min(Exp(mu_D), w_D - e)]
    // The newest segment is lost as well when the interruption comes within L_D of its end, after at
    // least one segment of this visit: in B0, an exit by interruption within L_D of a boundary,
    // k_d mu_D (1 - e^(-nu L_D)) / nu; in B1, a repair at e < L_D and an interruption before L_D,
    // k_d rho (int_0^L e^(-nu e) (1 - e^(-mu_D (L - e))) de).
    const double lag = degraded.durable_lag_s;
    const double lag_lost =
        k_d * (mu_d * window(nu, lag) + rho * (window(nu, lag) - std::exp(-mu_d * lag) * window(rho, lag)));
    const double segments = k_d + q_repair * c - lag_lost;
    const double b_prod = degraded.interval_s * segments;
    const double b_checkpoint = degraded.stall_s * segments;
    const double b_lost = 1.0 / nu + q_repair * t_b1 - w_d * segments;
    const double b_regrow = q_repair * c * retried(mu_f, lag + regrow_s);
    // Visits per cycle: each A0 visit leaves the degraded period through A1 or B0 -> B1 -> G.
    const double leave = p_a1 + p_b0 * q_repair * c;
    const double v_a0 = 1.0 / leave, v_b0 = p_b0 / leave;
    restart = v_a0 * (t_a0 + p_a1 * t_a1);
    prod_degraded = v_b0 * b_prod;
    checkpoint += v_b0 * b_checkpoint;
    lost += v_b0 * b_lost;
    regrow = v_b0 * b_regrow;
    on_degraded = v_b0 * (b_prod + b_checkpoint + b_lost);
  }
  const double total = prod_full + prod_degraded + checkpoint + lost + restart + regrow;
  ElasticShares t;
  t.productive = (prod_full + prod_degraded / slowdown) / total;
  t.degraded = prod_degraded * (1.0 - 1.0 / slowdown) / total;
  t.checkpoint = checkpoint / total;
  t.lost_work = lost / total;
  t.restart = restart / total;
  t.regrow = regrow / total;
  t.on_degraded = on_degraded / total;
  return t;
}

Result<std::int64_t> checkpoint_interval_steps(double step_s, double stall_s, double mtbf_s, double min_interval_s) {
  if (!(step_s > 0) || !std::isfinite(step_s)) return make_error("step_s: must be positive, got ", step_s);
  if (!(stall_s >= 0) || !std::isfinite(stall_s)) return make_error("stall_s: must not be negative, got ", stall_s);
  if (!(mtbf_s > 0) || !std::isfinite(mtbf_s)) {
    return make_error("mtbf_s: must be positive and finite, got ", mtbf_s, " (job_mtbf_s of a positive rate)");
  }
  if (!(min_interval_s >= 0) || !std::isfinite(min_interval_s)) {
    return make_error("min_interval_s: must not be negative, got ", min_interval_s);
  }
  const double best = std::max(daly_interval_s(stall_s, mtbf_s), min_interval_s);
  if (best / step_s > 1e15) return static_cast<std::int64_t>(1e15);  // beyond any run's length
  std::int64_t steps = std::max<std::int64_t>(1, std::llround(best / step_s));
  steps = std::max(steps, static_cast<std::int64_t>(std::ceil(min_interval_s / step_s)));
  return steps;
}

namespace {

CheckpointPolicy policy(CheckpointMode mode, double stall_s, double lag_s, double step_s, double mtbf_s,
                        double restart_s) {
  CheckpointPolicy p;
  p.mode = mode;
  p.stall_s = stall_s;
  p.durable_lag_s = lag_s;
  p.young_interval_s = young_interval_s(stall_s, mtbf_s);
  p.daly_interval_s = daly_interval_s(stall_s, mtbf_s);
  // An asynchronous write must finish before the next snapshot (at most one write in flight).
  p.interval_steps = *checkpoint_interval_steps(step_s, stall_s, mtbf_s, lag_s);
  p.interval_s = static_cast<double>(p.interval_steps) * step_s;
  p.shares = expected_time_shares(p.interval_s, stall_s, lag_s, restart_s, mtbf_s);
  return p;
}

}  // namespace

DegradedLayout degraded_layout(const model::LlamaConfig& cfg, const topology::Cluster& cluster,
                               const TrainingSpec& train, std::int64_t gpus, const SearchSpace& space) {
  DegradedLayout d;
  d.node_accelerators = cluster.node_size();
  d.survivors = gpus - d.node_accelerators;
  if (d.survivors < 1) {
    d.why_none = "the job's " + std::to_string(gpus) + " accelerators are within one node of " +
                 std::to_string(d.node_accelerators) + ": none survive its loss";
    return d;
  }
  // The survivors' layout within the job's search space: the knobs it fixes stay fixed (what its
  // software runs), the degrees and the other knobs are searched.
  Result<PlanResult> p = plan_up_to(cfg, cluster, train, d.survivors, space, 1);
  if (!p.ok()) {
    d.why_none = p.error().message();
  } else if (p->ranked.empty()) {
    d.why_none = "no layout of at most " + std::to_string(d.survivors) +
                 " accelerators fits memory with the global batch of " + std::to_string(train.global_batch) +
                 " sequences";
  } else {
    d.best = std::move(p->ranked.front());
  }
  return d;
}

namespace {

ElasticRecovery elastic_recovery(const Reliability& full, const Estimate& e, const topology::Cluster& cluster,
                                 const DegradedLayout& degraded) {
  ElasticRecovery x;
  x.node_accelerators = degraded.node_accelerators;
  x.survivors = degraded.survivors;
  if (!degraded.best) {
    x.why_not = degraded.why_none;
    return x;
  }
  const Estimate& d = *degraded.best;
  const Reliability on_survivors = project_reliability(d, cluster, full.spec);
  x.possible = true;
  x.layout = d.layout;
  x.accelerators = d.gpus;
  x.step_s = d.time.step_s;
  x.slowdown = d.time.step_s / e.time.step_s;
  x.mtbf_s = on_survivors.mtbf_s;
  x.policy = on_survivors.chosen();
  const CheckpointPolicy& f = full.chosen();
  const CheckpointedRun full_run{f.interval_s, f.stall_s, f.durable_lag_s, full.mtbf_s};
  const CheckpointedRun degraded_run{x.policy.interval_s, x.policy.stall_s, x.policy.durable_lag_s, x.mtbf_s};
  // The grow back is a planned restart: the same re-plan, start-up and load, announced.
  x.shares = elastic_time_shares(full_run, degraded_run, x.slowdown, full.spec.elastic_restart_s,
                                 full.spec.elastic_restart_s, full.spec.repair_s);
  return x;
}

}  // namespace

Reliability project_reliability(const Estimate& e, const topology::Cluster& cluster, const ReliabilitySpec& spec,
                                const DegradedLayout* degraded) {
  Reliability r;
  r.spec = spec;
  r.accelerators = e.gpus;
  r.mtbf_s = job_mtbf_s(spec.failure_rate_per_hour, static_cast<double>(e.gpus));
  r.interruptions_per_day = 86400.0 / r.mtbf_s;
  r.step_s = e.time.step_s;
  r.checkpoint_per_rank = e.checkpoint;
  r.checkpoint_total_bytes = e.checkpoint_total_bytes;
  if (spec.checkpoint_bw_gb_per_s > 0) {
    r.storage_bw_gb_per_s = spec.checkpoint_bw_gb_per_s;
    r.storage_bw_source = "--checkpoint-bandwidth";
  } else if (cluster.storage_bw_gb_per_s > 0) {
    r.storage_bw_gb_per_s = cluster.storage_bw_gb_per_s;
    r.storage_bw_source = "cluster " + cluster.name;
  } else {
    r.storage_bw_gb_per_s = kDefaultStorageGbPerS;
    r.storage_bw_source = "default: Llama 3's storage, cluster " + cluster.name + " gives none";
  }
  r.snapshot_s = e.checkpoint.total() / (spec.snapshot_bw_gb_per_s * 1e9);
  const double storage_s = e.checkpoint_total_bytes / (r.storage_bw_gb_per_s * 1e9);
  // Synchronous: the step waits while every accelerator's share leaves its memory and the whole
  // checkpoint reaches storage (the two overlap; the slower bounds). Asynchronous: the step waits for
  // the copy to host memory only; a background thread writes it to storage meanwhile.
  r.write_s = std::max(storage_s, r.snapshot_s);
  r.sync = policy(CheckpointMode::kSync, r.write_s, 0.0, r.step_s, r.mtbf_s, spec.restart_s);
  r.async = policy(CheckpointMode::kAsync, r.snapshot_s, storage_s, r.step_s, r.mtbf_s, spec.restart_s);
  if (degraded) r.elastic = elastic_recovery(r, e, cluster, *degraded);
  return r;
}

}  // namespace herd::planner
