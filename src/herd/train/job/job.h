// A training job from a TrainConfig: the path behind `herd train`, whatever the layout.
//
// Reads data.dir's train and val splits once (all ranks of the local backend share them), resolves the
// model, refuses a layout that does not fit the model, the batch or the world before any rank starts,
// picks the backend (parallel.backend; auto means mpi when mpirun started this process) and runs every
// rank of this process: all of them as threads (local; one rank is a local job of one thread) or the one
// rank this process is (mpi).
#pragma once

#include "herd/comm/world.h"
#include "herd/train/job/config.h"
#include "herd/train/job/launch.h"

namespace herd::train {

// A job id for dump names and the supervisor's records: "<yyyymmdd-hhmmss>-<pid>".
std::string make_job_id();

// The backend a config asks for, resolved against how this process was started.
Result<comm::Backend> resolve_backend(const TrainConfig& cfg);

// The model and the documents of a config (data.dir's splits; val may be empty).
struct JobInputs {
  model::LlamaConfig model;
  JobData data;
};
Result<JobInputs> load_job_inputs(const TrainConfig& cfg);

// Runs every rank of this process. diagnostics.job_id, when empty, is made here (MPI ranks take rank 0's),
// parallel.comm_timeout_s 0 is fitted (and logged on the lead rank), and a watchdog watches the ranks
// (train/job/watchdog.h; under MPI each process watches itself and ends itself when hung).
template <typename T>
Status run_job(const TrainConfig& cfg, const JobInputs& in, const RankModelFactory<T>& factory, JobResult<T>* out,
               std::int64_t stop_after = 0, bool gather = false);

}  // namespace herd::train
