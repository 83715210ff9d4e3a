// The planner held against herd's own runs: what `herd train` is predicted to cost on this machine
// (the `local-cpu` cluster: CPU ranks sharing the host's cores, fp32 or bf16 as train.precision says;
// a calibrated host carries both precisions' rates) and what it measured.
//
// project() maps a run's layout onto the planner's Layout and TrainingSpec and calls
// planner::estimate, so the numbers printed at the start of `herd train` ("planned") are exactly the
// planner's; at the end the same numbers stand next to the measured median step time and the rank's
// memory ("planned vs measured"). Measured memory is the activation arena's peak plus the parameter,
// gradient and optimizer bytes the rank holds (parallel::RankMemoryUse, reported by the trainers).
// The harness bench/projection/ runs many layouts and reports the error; docs/projection.md.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/core/json.h"
#include "herd/measure/host.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/parallel/rank_model.h"
#include "herd/planner/estimate.h"
#include "herd/topology/cluster.h"
#include "herd/train/job/config.h"
#include "herd/train/step/trainer.h"

namespace herd::train {

// The cluster the projection uses: `cluster_file` (projection.cluster_file, a `herd calibrate` output)
// when not empty, else the committed `local-cpu` preset. A malformed file is an error naming
// projection.cluster_file and the file's field.
Result<topology::Cluster> local_cpu_cluster(const std::string& cluster_file = "");
// The cluster a run plans with: projection.cluster_file when given; on a GPU (train.device=cuda) the
// preset of the GPU it finds (h200 for an H200, dgx-h100 otherwise: `herd calibrate --device cuda`
// measures herd's own kernels instead); else the local-cpu preset.
Result<topology::Cluster> run_cluster(const TrainConfig& cfg);
// A GPU run's peak for MFU, FLOP/s of one GPU in the run's precision (bf16's tensor-core peak, fp32's
// otherwise), of run_cluster's accelerator.
double device_peak_flops(const TrainConfig& cfg);

// Other jobs competing for this host's cores right now, before a run starts (the "planned" line):
// `fixed` when it is >= 0 (projection.background_jobs; 0: an idle host), here and for the run
// (below); else measure::sample_background_jobs().
double background_jobs(double fixed);

// The peak one core reaches for MFU, FLOP/s, in the run's precision: train.peak_gflops_per_core when
// given (fp32's; bf16 matmuls at twice the fp32 FMA rate, avx512_bf16's vdpbf16ps), else the per-core
// GEMM rate of the cluster the run plans with (peak_tflops.fp32 or .bf16 of this machine's calibration,
// which herd calibrate measures at the model's shapes, else of the local-cpu preset). The fixed
// 117 GFLOP/s of an AMD EPYC Zen 4 core would make an AMD EPYC (Zen 5, AVX-512) read 137% MFU.
double peak_flops_per_core(const TrainConfig& cfg);

struct Projection {
  ResolvedLayout layout;  // the run's layout and training shape (train/job/config.h)
  int threads = 0;        // kernel threads per rank (train.threads); 0 = the launcher's rule
  std::string cluster;
  model::LlamaConfig model;
  topology::Cluster host;              // the cluster as given (background_jobs as measured at the start)
  measure::HostCpuTimes cpu_at_start;  // set by plan_run on a shared host (ok = false otherwise)
  double background_jobs = 0;          // what the prediction assumed (accelerator.background_jobs)
  // The host's speed against its calibration that the prediction assumed (train/plan/host_speed.h): 1 when
  // not probed. probe_calibrated_flops > 0 when it was: the calibration's probe rate, and the ratio at
  // the start (and, once report_run has probed again, at the end; host_speed is then their mean).
  double host_speed = 1;
  double probe_calibrated_flops = 0;
  double host_speed_at_start = 1, host_speed_at_end = 1;
  double step_s_idle = 0;              // the same prediction with nothing measured at run time: background 0, speed 1
  double step_s_calibrated_speed = 0;  // the prediction for the background load at the calibrated speed (1)
  planner::Estimate estimate;
  // Memory of the rank, the planner's parts regrouped as the runtime measures them.
  double state_bytes = 0;             // parameters + gradients + optimizer state (embedding/head included)
  double activation_bytes = 0;        // saved activations at the schedule's peak + transient + buffers
  double saved_activation_bytes = 0;  // the first of those alone (model/activations.h x in-flight)
  double memory_bytes() const { return state_bytes + activation_bytes; }
  double step_s() const { return estimate.time.step_s; }
};

// The planner's prediction for this run on `cluster` (at the layout's precision; a single rank is
// ZeRO-0, more ranks are herd's FSDP flat units, ZeRO-3). threads: kernel threads per rank (0: the launcher's rule).
// host_speed: the host's speed against the calibration's (train/plan/host_speed.h), applied by at_host_speed.
Result<Projection> project(const model::LlamaConfig& m, const ResolvedLayout& layout, int threads,
                           const topology::Cluster& cluster, double host_speed = 1.0);

// `c` as this host runs now, at `speed` times its calibrated speed: every rate herd's CPU ranks execute
// at (the GEMM peaks, the streaming bandwidth, the local communicator's copies) times `speed`, the
// per-op overhead and the communicator's latency over it. Efficiencies, cores and the background load
// are left as they are.
topology::Cluster at_host_speed(topology::Cluster c, double speed);

// Median wall time of a step from a trainer's history (step time = the step's tokens / its tokens/s).
// The first step (warm-up, and its token count is not a difference) is left out unless it is the only
// one. 0 for an empty history.
double median_step_seconds(const std::vector<StepRecord>& history);

// What a run measured, to set beside the plan: the median step, the median time rank 0 spent blocked
// in collectives per step (the exposed communication; -1 where the trainer has no communicator), the
// step count and the rank's memory.
struct MeasuredRun {
  double step_s = 0;
  double comm_s = -1;
  // Cores' worth of CPU this job's processes used over the run (their CPU time / wall time, from the
  // host readings of the background load); -1 where /proc was unreadable, nothing was read, or the run
  // was too short for /proc's clock ticks. Beside
  // the background load it says whether a loaded host cost the job more than the cores it lost.
  double job_cores = -1;
  std::int64_t steps = 0;
  parallel::RankMemoryUse memory;
  // The step's parts on this rank, medians over the same steps (-1 where not measured): the time in
  // collectives by kind of group, the update, the checkpoints' critical-path time (a mean per step:
  // most steps write none), and the rest of the step, computing.
  std::array<double, measure::kGroupKinds> comm_by_kind_s{-1, -1, -1, -1, -1};
  double optimizer_s = -1, checkpoint_s = -1, compute_s = -1;
};
MeasuredRun measured_run(const std::vector<StepRecord>& history, const parallel::RankMemoryUse& memory);

// One part of a step as the planner costs it, beside what rank 0 measured (seconds per step).
// planned_s < 0: the planner has no such part; measured_s < 0: not measured.
struct StepPart {
  std::string name;  // "compute", "tp", "cp", "dp", "pp + bubble", "optimizer", "control", "checkpoint"
  double planned_s = -1, measured_s = -1;
};
// The parts of the run's layout: compute (the planner's compute and straggler wait; measured, the step
// less everything below), the exposed collectives of each axis with a degree above one (pp with the
// bubble, which a rank spends waiting on its pipeline peers), the optimizer, and what the planner does
// not cost per step: the trainer's control collectives and the checkpoints.
std::vector<StepPart> step_parts(const Projection& p, const MeasuredRun& run);
// "by part (rank 0, per step): compute 0.30 vs 0.28 s (+7.1%) | dp 0.02 vs 0.05 s (-60.0%) | ..."
std::string parts_line(const std::vector<StepPart>& parts);
// [{"part", "planned_s", "measured_s"}], null where a side has none: the projection file's "parts".
Json parts_json(const std::vector<StepPart>& parts);

// "planned: step 1.23 s (compute 1.10, comm 0.08, bubble 0.00, optimizer 0.05) | memory 312.4 MiB ..."
std::string planned_line(const Projection& p);
// "planned vs measured: step 1.23 s vs 1.30 s (-5.4%) | exposed comm 0.08 s vs 0.10 s | memory ..."
std::string planned_vs_measured_line(const Projection& p, const MeasuredRun& run);
Json projection_json(const Projection& p, const MeasuredRun& run);

// The two call sites of the trainers. plan_run logs the "planned" line and returns the projection, or
// an error the caller may ignore (training never depends on it; !print: nothing is planned, as on
// quiet trainers and ranks other than 0); on a shared
// host it keeps sampling the background load. With probe_host (ranks that are threads of this
// process, which sleep while they wait: the trainer holds them at a barrier meanwhile) and a calibration
// that recorded the host speed probe, it probes the host (projection.speed_probe) and plans at the ratio.
// report_run logs "planned vs measured", the plan redone for the background load averaged over the
// run and the host's speed at the start and the end (inputs measured apart from the step times), and
// writes train.projection_file when set.
Result<Projection> plan_run(const TrainConfig& cfg, const model::LlamaConfig& m, bool print, bool probe_host = false);
void report_run(const Result<Projection>& plan, const TrainConfig& cfg, const std::vector<StepRecord>& history,
                const parallel::RankMemoryUse& mem, bool print);

}  // namespace herd::train
