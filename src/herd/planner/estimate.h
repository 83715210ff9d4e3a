// `herd estimate`: memory and step time of one layout, each broken down, with the assumptions stated.
//
// Step time = the pipeline step simulated by schedule/ over per-stage costs (compute + exposed TP and
// CP collectives, point-to-point transfers on the PP link) + the exposed part of the data-parallel
// (FSDP/ZeRO) collectives + the optimizer step. The breakdown sums to the step time exactly:
// compute + exposed TP + exposed CP on the busiest rank, its idle time (the bubble), the delay the
// p2p transfers add, exposed DP, optimizer. Derivations and sources: docs/planner.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/model/config.h"
#include "herd/planner/cost.h"
#include "herd/planner/layout.h"
#include "herd/planner/memory.h"
#include "herd/schedule/schedule.h"
#include "herd/schedule/simulate.h"
#include "herd/topology/cluster.h"

namespace herd::planner {

struct TimeBreakdown {
  double compute_s = 0;    // kernels on the busiest pipeline rank (recompute included)
  double bubble_s = 0;     // its idle time in the simulated pipeline without p2p cost
  double tp_s = 0;         // exposed TP collectives (not overlapped)
  double cp_s = 0;         // exposed CP K/V all-gather and dK/dV reduce-scatter (the paper: exposed)
  double pp_s = 0;         // what point-to-point transfers add to the simulated step
  double dp_s = 0;         // FSDP / ZeRO collectives not hidden behind compute
  double optimizer_s = 0;  // AdamW over the local fp32 shard, memory bound
  double straggler_s = 0;  // waiting for the slowest accelerator: compute x sigma x sqrt(2 ln G)
  double step_s = 0;
  double exposed_comm_s() const { return tp_s + cp_s + pp_s + dp_s; }
};

// The tier each group crosses under [TP, CP, PP, DP] placement, with the total (not just exposed)
// communication time per step, to show what overlap hides.
struct DimComm {
  std::string dim;  // "tp", "cp", "pp", "dp"
  std::int64_t size = 1;
  std::int64_t stride = 1;
  std::string tier;  // "nvlink", "rack", ...
  double bw_gb_per_s = 0;
  double total_s = 0;    // every collective of this dimension in one step, back to back
  double exposed_s = 0;  // the part on the critical path
  std::string overlap;   // the rule applied
};

struct Estimate {
  Layout layout;
  TrainingSpec train;
  std::int64_t gpus = 0;
  std::int64_t microbatches = 0;          // M per pipeline (per DP rank)
  int n = 0;                              // N used by the schedule
  MemoryBreakdown memory;                 // the worst pipeline rank
  std::vector<double> rank_memory_bytes;  // every pipeline rank's total
  // Every pipeline rank's compute + TP + CP time per step (all micro-batches, at the rank's share of
  // a shared host), the busiest of which is time.compute_s + tp_s + cp_s before time-slicing.
  std::vector<double> pipeline_rank_busy_s;
  TimeBreakdown time;
  // Checkpoint state (planner/memory.h): the largest per-accelerator share, on the pipeline rank with
  // the most parameters, and the whole job's (every byte once).
  CheckpointBytes checkpoint;
  double checkpoint_total_bytes = 0;
  std::vector<DimComm> comm;
  double model_flops_per_token = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;
  double mfu = 0;                  // model FLOPs / (step time x GPUs x bf16 peak)
  double hfu = 0;                  // hardware FLOPs (recompute, flash backward) / the same
  double compute_bound_ratio = 0;  // max over dims of total comm / compute (> 1: communication-bound)
  std::string bound;               // "compute-bound" or "communication-bound (dp)" ...
  std::vector<std::string> assumptions;
  bool fits() const { return memory.fits(); }
  // Kept for reports (timeline rendering); empty unless requested.
  schedule::Schedule schedule;
  schedule::SimResult sim;
};

struct EstimateOptions {
  bool keep_timeline = false;
  // false: the search's quick pass. The bubble is the paper's (PP-1)/(V*M) of the busiest rank, the
  // in-flight micro-batches come from the depth-first warm-up count ((V-1)*N + 2*(PP-1-r) + 1 chunk
  // passes on rank r), and only the first and last pipeline ranks are sized. Final rankings always
  // come from the simulator.
  bool simulate = true;
  // Layer split of this layout's (PP, V), when the caller has it already (the search caches them).
  const schedule::LayerAssignment* assignment = nullptr;
};

Result<Estimate> estimate(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                          const Layout& layout, std::int64_t gpus, const EstimateOptions& options = {});
// The same from costs already computed for this layout (the search shares them between layouts that
// differ only in V and N). The layout must have passed validate_layout.
Result<Estimate> estimate_from_costs(const model::LlamaConfig& cfg, const topology::Cluster& cluster,
                                     const TrainingSpec& train, const Layout& layout, std::int64_t gpus,
                                     const StepCosts& costs, const EstimateOptions& options);

// The layer split a layout runs with, kEven or kLightEnds: as given, or under kAuto the one whose
// busiest pipeline rank (its chunks' layers + the embedding on virtual stage 0 + the output head and
// loss on the last, forward and backward) is lighter; even on a tie, light ends when the layers
// cannot fill every virtual stage. And the layer assignment under it.
LayerSplit resolve_layer_split(const model::LlamaConfig& cfg, const Layout& layout, const StepCosts& costs);
Result<schedule::LayerAssignment> layer_assignment(const model::LlamaConfig& cfg, const Layout& layout,
                                                   const StepCosts& costs);

// The flexible Llama 3 schedule the planner simulates for a layout.
schedule::ScheduleSpec schedule_spec(const Layout& layout, const TrainingSpec& train);

}  // namespace herd::planner
