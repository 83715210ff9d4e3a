// The rank launcher: starts the ranks of a TP x CP x PP x DP job (one rank included) and runs the
// Trainer on each.
//
// Two backends (comm/world.h): `local` runs the ranks as threads of this process over shared memory
// (the default on one machine, and what the tests use); `mpi` runs this process as one rank of a job
// that mpirun started (detected from OMPI_COMM_WORLD_SIZE and friends). Either way each rank builds its
// axis groups from the world communicator (parallel::ParallelGroups), its model from a factory, and the
// same Trainer; rank 0 collects the loss history and the full weights for the caller.
//
// With as many ranks as cores or more, every rank gets one BLAS thread (oversubscribed
// OpenMP/BLAS threads collapse); otherwise the cores are shared out evenly.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "herd/comm/communicator.h"
#include "herd/data/shard.h"
#include "herd/model/config.h"
#include "herd/parallel/context.h"
#include "herd/train/job/config.h"
#include "herd/train/step/rank_model.h"
#include "herd/train/step/trainer.h"

namespace herd::train {

template <typename T>
using RankModelFactory = std::function<Result<std::unique_ptr<RankModel<T>>>(
    const parallel::ParallelContext& ctx, const model::LlamaConfig& m, const TrainConfig& cfg)>;

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

// The documents a job trains on and evaluates on (val may be empty: no evaluation).
struct JobData {
  std::shared_ptr<const data::TokenDocuments> train, val;
};

// One rank on its world communicator: groups, model, trainer, run, gather. `out` is filled on rank 0.
template <typename T>
Status run_rank(comm::Communicator& world, const TrainConfig& cfg, const model::LlamaConfig& m, const JobData& data,
                const RankModelFactory<T>& factory, JobResult<T>* out, std::int64_t stop_after = 0, bool gather = true);

// All ranks as threads of this process (the local backend), one rank included, under a watchdog
// (train/job/watchdog.h; parallel.comm_timeout_s 0 is fitted first). The error, if any, names the first
// rank that failed, or the rank the watchdog found hung; result.dump_paths lists the flight-recorder
// files written.
template <typename T>
Status run_local_job(const TrainConfig& cfg, const model::LlamaConfig& m, const JobData& data,
                     const RankModelFactory<T>& factory, JobResult<T>* out, std::int64_t stop_after = 0,
                     bool gather = true);

}  // namespace herd::train
