// herd calibrate's reference steps: real training steps through the trainer of `herd train` (one rank
// on one thread and on every core, two thread ranks, a bf16 step), each the median of its undisturbed
// takes, and what they make of the kernel-rate cluster (the runtime efficiencies, the thread scaling,
// the multi-rank efficiency and the rank skew).
#pragma once

#include "herd/core/error.h"
#include "herd/topology/cluster.h"
#include "herd/train/plan/calibrate_kernels.h"

namespace herd::train::calibration {

struct ReferenceStep {
  double step_s = 0;  // median step (the first left out)
  double comm_s = 0;  // median time inside the communicator per step (the distributed path only)
  double loss = 0;    // the last step's loss: the same documents in both precisions, so bf16's differs
};

// The runtime around the kernels: real training steps through the trainer of `herd train`, each kept as
// the median of its undisturbed takes. Unlike the kernel rates (on the thread's CPU clock, where the
// fastest take is the machine's rate), a plan is for a run's median step, what `herd train` reports, and
// on a shared host the best of several runs is faster than a typical one. Neither reference is a layout of
// bench/projection: every row there is a prediction.
struct ReferenceSteps {
  ReferenceStep one;        // 1 rank, 1 thread, fp32
  ReferenceStep all_cores;  // 1 rank on every core (step_s 0 on one core)
  bool all_cores_disturbed = false;
  ReferenceStep two_ranks;                   // DP = 2, the same work per rank
  ReferenceStep bf16;                        // 1 rank, 1 thread, bf16
  double probe_before = 0, probe_after = 0;  // the host speed probe around them (train/plan/host_speed.h)
};

Result<ReferenceSteps> measure_reference_steps(Session& s);

// What the reference steps make of the kernel-rate cluster: the ratio of the planner's projection of the
// one-rank step from the kernel rates to the measured step (the model's copies and layout changes, cold
// caches between layers, the loss and optimizer passes as herd runs them) derates every compute rate, in
// fp32 and in bf16; the all-core step gives the thread scaling; the two-rank step the multi-rank
// efficiency and the rank skew.
struct RuntimeFit {
  double kernels_only_s = 0, bf16_kernels_only_s = 0;  // the planner's one-rank steps from the kernel rates
  double efficiency = 0, bf16_efficiency = 0;
  double thread_scaling = 0;
  bool step_scaling = false;  // thread_scaling from the all-core step (else the GEMM's, or the preset's)
  double planned_two_rank_comm_s = 0, rank_wait_s = 0;
};

// Derates `c`'s kernel rates by the reference steps (and sets its thread scaling, multi-rank efficiency
// and speed variation); `gemm_scaling` is the thread scaling used when the all-core step is not usable.
Result<RuntimeFit> fit_runtime(const Session& s, const ReferenceSteps& ref, double gemm_scaling, bool idle,
                               topology::Cluster& c);

}  // namespace herd::train::calibration
