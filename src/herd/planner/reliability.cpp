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

Reliability project_reliability(const Estimate& e, const topology::Cluster& cluster, const ReliabilitySpec& spec) {
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
  return r;
}

}  // namespace herd::planner
