// A training job from a TrainConfig: the path behind `herd train`, whatever the layout.
//
// Start-up is one path. check_layout resolves the layout from the config (batch split, schedule) and
// refuses one that does not fit the model, the batch or the world, once, before any rank starts; it
// returns the JobLayout every rank builds from. run_job picks the backend (parallel.backend; auto means
// mpi when mpirun or srun --mpi=pmix started this process: resolve_launch) and runs every rank of this process: all of
// them as threads of this process over shared memory (local; one rank is a local job of one thread, and the tests use
// it), or the one rank this process is (mpi). Each rank (run_rank) splits its world into the mesh's
// axis groups in one call (parallel::ParallelGroups::make), builds its parallel::RankModel and runs the
// Trainer; rank 0 collects the loss history and the full weights for the caller.
//
// With as many ranks as cores or more, every rank gets one BLAS thread (oversubscribed OpenMP/BLAS
// threads collapse); otherwise the cores are shared out evenly.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "herd/comm/communicator.h"
#include "herd/comm/world.h"
#include "herd/core/launch_env.h"
#include "herd/data/shard.h"
#include "herd/model/config.h"
#include "herd/parallel/context.h"
#include "herd/parallel/rank_model.h"
#include "herd/schedule/schedule.h"
#include "herd/topology/parallel_dims.h"
#include "herd/train/job/config.h"
#include "herd/train/step/trainer.h"

namespace herd::train {

// A layout resolved from the config and checked against the model and the world.
struct JobLayout {
  ResolvedLayout resolved;  // the config's layout with the micro-batch size and n filled in, and M
  topology::ParallelDims dims = topology::ParallelDims::make(1, 1, 1, 1).value();  // the mesh
  schedule::ScheduleSpec schedule;  // pp, v, M, n and the kind the pipeline runs
  // What each rank's model is built with (seq_len: the full sequence length).
  parallel::RankModelOptions model_options(std::int64_t seq_len) const;
};

// Everything about a layout that can be refused before any rank starts, with the numbers: the degrees
// and their product against the world (world_size 0: unchecked), the batch split (resolve_layout), the
// model's shard rules (heads, KV heads, FFN and vocabulary by tp; the sequence by 2 x cp and, with
// sequence parallelism, the CP-local sequence by tp), the pipeline's schedule and layer split
// (parallel::pp::plan_pipeline), and the batch ramp's shapes.
Result<JobLayout> check_layout(const TrainConfig& cfg, const model::LlamaConfig& m, std::int64_t world_size);

// The communicator options of a run: comm.*, parallel.comm_timeout_s (as given: resolve 0 first, see
// train/job/watchdog.h), the diagnostics directory and the job id.
comm::CommOptions comm_options(const TrainConfig& cfg);

// diagnostics.dir resolved: as given, else <checkpoint.dir>/diagnostics, else the directory of
// train.metrics_file, else the system temp directory.
std::string diagnostics_dir(const TrainConfig& cfg);

// A job id for dump names and the supervisor's records: "<yyyymmdd-hhmmss>-<pid>".
std::string make_job_id();

// How this process was started (core/launch_env.h) and the backend parallel.backend asks for,
// resolved against it.
struct JobLaunch {
  comm::Backend backend = comm::Backend::kLocal;
  LaunchEnv env;  // the launcher's view of this process (source kNone for ranks as threads)
  // Prints, owns the checkpoint directory's lock and the other duties of rank 0: every local job,
  // and rank 0 of a job of processes (mpi, gloo).
  bool lead() const { return backend == comm::Backend::kLocal || env.rank == 0; }
};

// auto: mpi under an MPI launcher (mpirun, srun --mpi=pmix); gloo under a launcher of several processes
// without MPI (torchrun, srun without PMIx), refused with what to run instead in a build without gloo;
// local otherwise. mpi outside an MPI launcher is refused; gloo needs a launcher that names the job
// (core/launch_env.h's job key). local under a launcher of several processes is refused (each would run
// the whole job); launcher variables that are malformed or disagree do not stop an explicit local job
// (ranks as threads read none of them).
Result<JobLaunch> resolve_launch(const TrainConfig& cfg, const Environment& env);

// Where a gloo job's ranks meet: parallel.rendezvous_dir, else <checkpoint.dir>/rendezvous, else the
// temp dir's herd-rendezvous (one host only).
std::string rendezvous_dir(const TrainConfig& cfg);

// The documents a job trains on and evaluates on (val may be empty: no evaluation).
struct JobData {
  std::shared_ptr<const data::TokenDocuments> train, val;
};

// The model and the documents of a config (data.dir's splits; val may be empty).
struct JobInputs {
  model::LlamaConfig model;
  JobData data;
};
Result<JobInputs> load_job_inputs(const TrainConfig& cfg);

template <typename T>
struct JobResult {
  std::vector<StepRecord> history;                              // rank 0's
  std::vector<std::pair<std::string, std::vector<T>>> weights;  // gathered full weights at the end
  double step_seconds = 0;                                      // rank 0's total step time
  double comm_seconds = 0;                                      // rank 0's time inside collectives
  std::vector<std::string> dump_paths;                          // flight-recorder dumps after a failure
  std::int64_t resumed_from = -1;                               // the checkpoint step resumed from; -1: none
  bool preempted = false;  // the job stopped on SIGTERM/SIGUSR1 after a checkpoint (exit code 143)
  bool quiet = false;      // set by the caller: rank 0 prints no progress or projection lines either
  // Set by the caller that owns the process (`herd train`): the watchdog ends the process when a hung rank
  // cannot be joined (train/job/watchdog.h). Off in tests that run jobs in-process.
  bool exit_on_hang = false;
  // Set by the caller: each rank's step clock (train/step/straggler_monitor.h), by rank; unset, the measured
  // one. The straggler watch's tests set figures of their own through it.
  std::function<std::unique_ptr<StepClock>(int rank)> step_clock;
};

// BLAS threads for each of `ranks` ranks on this machine's cores.
int blas_threads_per_rank(int ranks);

// One rank on its world communicator: groups, model, trainer, run, gather. `out` is filled on rank 0.
template <typename T>
Status run_rank(comm::Communicator& world, const TrainConfig& cfg, const JobLayout& layout, const model::LlamaConfig& m,
                const JobData& data, JobResult<T>* out, std::int64_t stop_after = 0, bool gather = true);

// Runs every rank of this process on the config's backend. diagnostics.job_id, when empty, is made
// here (MPI ranks take rank 0's), parallel.comm_timeout_s 0 is fitted (and logged on the lead rank),
// and a watchdog watches the ranks (train/job/watchdog.h; under MPI each process watches itself and
// ends itself when hung). The error, if any, names the first rank that failed, or the rank the
// watchdog found hung; out->dump_paths lists the flight-recorder files written.
template <typename T>
Status run_job(const TrainConfig& cfg, const JobInputs& in, const JobLayout& layout, JobResult<T>* out,
               std::int64_t stop_after = 0, bool gather = false);

// All ranks as threads of this process (the local backend), the layout checked first: what the
// tests, benchmarks and calibration run.
template <typename T>
Status run_local_job(const TrainConfig& cfg, const model::LlamaConfig& m, const JobData& data, JobResult<T>* out,
                     std::int64_t stop_after = 0, bool gather = true);

}  // namespace herd::train
