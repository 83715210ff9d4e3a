// The RankModel of `herd train --tp --cp --pp --dp`: parallel::DistributedLlama (TP + CP + FSDP over
// CP x DP) when pp = 1, the pipeline of distributed stages (pipeline_model.h) otherwise, behind the
// trainer's narrow interface (rank_model.h).
#pragma once

#include <vector>

#include "herd/parallel/dist_stage.h"
#include "herd/train/job/launch.h"

namespace herd::train {

template <typename T>
RankModelFactory<T> distributed_llama_factory();

// Appends the checkpoint pieces of one distributed stage's units (parameters and AdamW moments).
// for_load: replicated norms on every TP rank (each loads them); else on TP rank 0 only (each element
// is saved once).
template <typename T>
void append_stage_pieces(parallel::DistributedStage<T>& stage, const parallel::ParallelContext& ctx, bool for_load,
                         std::vector<ShardPiece<T>>& out);

}  // namespace herd::train
