// The RankModel of a pipelined 4D job (`herd train --pp P` with any --tp --cp --dp): a
// parallel::pp::PipelineExecutor whose chunks are parallel::DistributedStages (TP-local, FSDP-sharded
// over CP x DP, with the TP and CP hooks), behind the trainer's narrow interface (rank_model.h).
//
// The step's M micro-batches are the pipeline's M and run together through the rank's
// schedule (forward_backward_step); the loss comes back to every pipeline rank. The global gradient
// norm sums each chunk's shards over TP (replicated norms once), CP x DP and the pipeline ranks (which
// hold different units). Checkpoint pieces are those of every chunk's units, so a checkpoint written
// by one layout (any tp, cp, pp, v, dp) loads into another.
#pragma once

#include <memory>

#include "herd/core/error.h"
#include "herd/model/config.h"
#include "herd/parallel/context.h"
#include "herd/schedule/schedule.h"
#include "herd/train/job/config.h"
#include "herd/train/step/rank_model.h"

namespace herd::train {

// parallel.pp, parallel.v, M (train.global_batch / (dp x microbatch)), parallel.n (N) and parallel.schedule,
// from resolve_layout.
Result<schedule::ScheduleSpec> pipeline_spec(const TrainConfig& cfg);

// With pp > 1: the schedule checker's and the layer split's refusals (pp::plan_pipeline), with the
// numbers, before any rank starts. Ok when pp = 1.
Status check_pipeline(const TrainConfig& cfg, const model::LlamaConfig& m);

template <typename T>
Result<std::unique_ptr<RankModel<T>>> make_pipeline_llama(const parallel::ParallelContext& ctx,
                                                          const model::LlamaConfig& m, const TrainConfig& cfg);

}  // namespace herd::train
