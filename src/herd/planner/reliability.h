// Reliability projection: how much of a job's wall time trains, given how often it is interrupted, how
// long a checkpoint holds the step up and how long a restart takes.
//
// A synchronous job stops as a whole when one accelerator fails (Llama 3, section 3.3.4), so its
// interruptions arrive at the failure rate per accelerator-hour times the accelerators: the job's
// mean time between failures is M = 1 / (rate x accelerators). Each interruption costs a restart and
// the work done since the last checkpoint that reached storage; each checkpoint costs its stall on the
// step's critical path. The interval between checkpoints trades the two: Young's first-order optimum
// sqrt(2 x stall x M), or Daly's higher-order one (used here). Failures are taken as a Poisson process
// (Daly 2006), which also counts failures during restarts and during the lost work's redo; the wall
// time then splits exactly into productive, checkpoint, lost work and restart time, and the
// effective training time (ETT, the paper's measure) is the productive share. Derivations, sources
// and the Llama 3 405B numbers: docs/reliability-planner.md.
//
// Two recoveries from a failed accelerator are projected. Replacement (the model above): wait
// restart_s for a spare or a requeue and resume at the full layout. Elastic: restart at once on the
// accelerators that survive the loss of a node, at the fastest layout the planner finds for them
// (plan_up_to), run degraded until the node is repaired, then grow back at a planned restart after
// a checkpoint; its ETT counts degraded training at its throughput relative to the full layout.
//
// The formulas are free functions so the trainer can call them with a measured step time and
// checkpoint stall (checkpoint_interval_steps).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "herd/core/error.h"
#include "herd/planner/estimate.h"
#include "herd/planner/search.h"
#include "herd/topology/cluster.h"

namespace herd::planner {

// Llama 3 405B pre-training (paper section 3.3.4): 419 unexpected interruptions in a 54-day snapshot
// on 16,384 H100 GPUs (the 47 planned ones are announced, so they cost a restart but no lost work).
inline constexpr double kLlama3UnexpectedInterruptions = 419;
inline constexpr double kLlama3SnapshotDays = 54;
inline constexpr double kLlama3Gpus = 16384;
inline constexpr double kLlama3FailureRatePerHour =
    kLlama3UnexpectedInterruptions / (kLlama3SnapshotDays * 24.0 * kLlama3Gpus);  // 1.97e-5
// Detection (a collective timeout), rescheduling, process start, communicator set-up and checkpoint
// load at 16K accelerators; 10 min is PyTorch's default NCCL collective timeout alone, and the most
// the paper's figures leave room for (docs/reliability-planner.md, "Restart time").
inline constexpr double kDefaultRestartS = 600;
// Checkpoint storage when neither the flag nor the cluster gives one: the Llama 3 cluster's Tectonic
// file system, 2 TB/s sustained (paper section 3.3.1).
inline constexpr double kDefaultStorageGbPerS = 2000;
// Device-to-host copy per accelerator for an asynchronous snapshot: PCIe Gen5 x16 is 64 GB/s per
// direction; pinned copies reach about 50, halved because two GPUs share each host-side switch.
inline constexpr double kDefaultSnapshotGbPerS = 25;
// Elastic restart on the survivors: detection by the processes' own watchdog and heartbeats (a lost
// GPU ends its process; about 1 min), the re-plan (about a second), process start and communicator
// set-up (about 2 min at 16K accelerators) and the checkpoint load (3 s for 5.7 TB at 2 TB/s); what
// it does not wait for is a spare node or a requeue, the rest of kDefaultRestartS
// (docs/reliability-planner.md, "Elastic recovery").
inline constexpr double kDefaultElasticRestartS = 180;
// Mean time until a failed node is back in the job: an on-site part swap (GPU, board, cable) within
// the common 4-hour on-site service level of data-center hardware; a reset that clears the fault is
// quicker, a part on order slower (docs/reliability-planner.md, "Elastic recovery").
inline constexpr double kDefaultRepairS = 4 * 3600;

enum class CheckpointMode { kSync, kAsync };
const char* checkpoint_mode_name(CheckpointMode m);
Result<CheckpointMode> parse_checkpoint_mode(const std::string& s);

struct ReliabilitySpec {
  double failure_rate_per_hour = kLlama3FailureRatePerHour;  // unexpected interruptions per accelerator-hour
  double checkpoint_bw_gb_per_s = 0;  // aggregate storage write bandwidth of the job; 0: the cluster's, or default
  double snapshot_bw_gb_per_s = kDefaultSnapshotGbPerS;  // per accelerator, device to host memory (async)
  double restart_s = kDefaultRestartS;                   // failure to the first step of the restarted job
  CheckpointMode mode = CheckpointMode::kAsync;          // the mode `ett` and the interval are reported for
  double elastic_restart_s = kDefaultElasticRestartS;    // elastic: failure to the survivors' first step
  double repair_s = kDefaultRepairS;                     // elastic: mean time until the lost node is back
};
// Errors name the flag that sets each field (--failure-rate, --checkpoint-bandwidth, ...).
Status validate(const ReliabilitySpec& spec);

// The job's mean time between interruptions, seconds.
double job_mtbf_s(double failure_rate_per_hour, double accelerators);
// Young (1974): sqrt(2 x stall x M), compute time between checkpoints.
double young_interval_s(double stall_s, double mtbf_s);
// Daly (2006), higher order: sqrt(2 d M) (1 + sqrt(d / 2M) / 3 + d / 18M) - d for d < 2M, else M.
double daly_interval_s(double stall_s, double mtbf_s);

// Fractions of wall time (summing to 1) with a checkpoint after every `interval_s` of training, each
// stalling the step `stall_s`, reaching storage `durable_lag_s` after its stall ends (0 when the
// write is the stall), a restart of `restart_s`, and Poisson interruptions with mean gap `mtbf_s`.
struct TimeShares {
  double productive = 0;  // the ETT
  double checkpoint = 0;  // stalls of checkpoints that were kept
  double lost_work = 0;   // work (and stalls) redone after interruptions
  double restart = 0;     // restarts, including restarts interrupted themselves
};
TimeShares expected_time_shares(double interval_s, double stall_s, double durable_lag_s, double restart_s,
                                double mtbf_s);

// A run at one layout between interruptions: a checkpoint after every `interval_s` of training, each
// stalling the step `stall_s` and durable `durable_lag_s` after its stall, and Poisson interruptions
// with mean gap `mtbf_s`.
struct CheckpointedRun {
  double interval_s = 0;
  double stall_s = 0;
  double durable_lag_s = 0;
  double mtbf_s = 0;
};

// Fractions of wall time (summing to 1) under elastic recovery. `productive` is the ETT: training on
// the full layout, plus training on the degraded one divided by its slowdown (full-layout training
// time that degraded training is worth); `degraded` is the rest of the degraded training time.
struct ElasticShares {
  double productive = 0;
  double degraded = 0;    // degraded training x (1 - 1 / slowdown)
  double checkpoint = 0;  // stalls of checkpoints that were kept, on either layout
  double lost_work = 0;   // work (and stalls) redone after interruptions, on either layout
  double restart = 0;     // elastic restarts after interruptions, retried when interrupted themselves
  double regrow = 0;      // growing back: the last checkpoint's write, then a planned restart
  // Not part of the sum: the fraction of wall time spent running the degraded layout.
  double on_degraded = 0;
};

// Elastic recovery. The job runs `full`; an interruption restarts it at once (`restart_s`, retried at
// each interruption, on the degraded layout while the node is away) on the survivors, who run
// `degraded` (its step `slowdown` times the full layout's) until the lost node is back: a repair
// time exponentially distributed with mean `repair_s` from the interruption, nodes lost meanwhile
// repaired with it. Back, the job finishes its segment, waits for that checkpoint's write and grows
// back at a planned restart (`regrow_s`, retried when interrupted); a repair during a restart makes
// that restart bring up the full layout. An interruption after the repair, before the grow back,
// starts a new degraded period. repair_s = 0 is replacement with a restart of restart_s.
// Derivation: docs/reliability-planner.md, "Elastic recovery".
ElasticShares elastic_time_shares(const CheckpointedRun& full, const CheckpointedRun& degraded, double slowdown,
                                  double restart_s, double regrow_s, double repair_s);

// The trainer's entry point: steps between checkpoints for a step time, a checkpoint's stall on the
// step and the job's MTBF (job_mtbf_s), all in seconds: Daly's interval rounded to whole steps, at
// least one step and at least `min_interval_s` (an asynchronous write's duration: one write in flight).
// Errors name the argument (a non-positive step, a negative stall, an MTBF that is not finite and positive).
Result<std::int64_t> checkpoint_interval_steps(double step_s, double stall_s, double mtbf_s, double min_interval_s = 0);

// One checkpointing mode at the recommended interval.
struct CheckpointPolicy {
  CheckpointMode mode = CheckpointMode::kSync;
  double stall_s = 0;        // on the critical path, per checkpoint
  double durable_lag_s = 0;  // from the stall's end until the checkpoint is on storage
  double young_interval_s = 0;
  double daly_interval_s = 0;
  std::int64_t interval_steps = 0;
  double interval_s = 0;  // interval_steps x step time
  TimeShares shares;
};

// The elastic recovery of a projected job (Reliability::elastic).
struct ElasticRecovery {
  std::int64_t node_accelerators = 0;  // lost with a node
  std::int64_t survivors = 0;
  bool possible = false;
  std::string why_not;            // when not possible
  Layout layout;                  // the degraded layout
  std::int64_t accelerators = 0;  // that it uses, at most `survivors`
  double step_s = 0;
  double slowdown = 0;      // degraded step / full step
  double mtbf_s = 0;        // at `accelerators`
  CheckpointPolicy policy;  // the degraded layout's checkpoints, in the chosen mode
  ElasticShares shares;
};

struct Reliability {
  ReliabilitySpec spec;
  std::int64_t accelerators = 0;
  double mtbf_s = 0;
  double interruptions_per_day = 0;
  double step_s = 0;
  CheckpointBytes checkpoint_per_rank;  // the largest accelerator's share
  double checkpoint_total_bytes = 0;
  double storage_bw_gb_per_s = 0;  // used: the flag's, the cluster's, or kDefaultStorageGbPerS
  std::string storage_bw_source;   // "--checkpoint-bandwidth", "cluster llama3-h100", "default (...)"
  double write_s = 0;              // the whole checkpoint from accelerator memory to storage
  double snapshot_s = 0;           // one accelerator's share to host memory
  CheckpointPolicy sync, async;
  const CheckpointPolicy& chosen() const { return spec.mode == CheckpointMode::kSync ? sync : async; }
  // Elastic recovery in the chosen checkpointing mode, when the survivors' layout was given.
  std::optional<ElasticRecovery> elastic;
};

// What a job's survivors run after losing a node: the fastest layout the planner finds on at most
// `survivors` accelerators that fits memory and keeps the global batch (plan_up_to), in `space` (the
// knobs the job fixes stay fixed).
struct DegradedLayout {
  std::int64_t node_accelerators = 0;  // lost with one node (Cluster::node_size)
  std::int64_t survivors = 0;
  std::optional<Estimate> best;  // none: no accelerator survives, or no layout of at most `survivors` fits
  std::string why_none;
};
DegradedLayout degraded_layout(const model::LlamaConfig& cfg, const topology::Cluster& cluster,
                               const TrainingSpec& train, std::int64_t gpus, const SearchSpace& space);

// The projection for an estimated layout (its step time, checkpoint bytes and accelerator count), and
// its elastic recovery when `degraded` is given. The spec must have passed validate().
Reliability project_reliability(const Estimate& e, const topology::Cluster& cluster, const ReliabilitySpec& spec,
                                const DegradedLayout* degraded = nullptr);

}  // namespace herd::planner
