// A TP x DP training job from a TrainConfig: the path behind `herd train --tp T --dp D`.
//
// Reads data.dir's train split once (all ranks of the local backend share it), resolves the model,
// refuses a layout that does not fit the model, the batch or the world before any rank starts, picks
// the backend (parallel.backend; auto means mpi when mpirun started this process) and runs every
// rank of this process: all of them as threads (local) or the one rank this process is (mpi).
#pragma once

#include "herd/comm/world.h"
#include "herd/train/config.h"
#include "herd/train/launch.h"

namespace herd::train {

// The backend a config asks for, resolved against how this process was started.
Result<comm::Backend> resolve_backend(const TrainConfig& cfg);

template <typename T>
Status run_parallel_job(const TrainConfig& cfg, const RankModelFactory<T>& factory, JobResult<T>* out);

}  // namespace herd::train
