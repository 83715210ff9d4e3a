// The RankModel of `herd train --tp --dp`: parallel::DistributedLlama (TP + FSDP) behind the trainer's
// narrow interface (rank_model.h).
#pragma once

#include "herd/train/launch.h"

namespace herd::train {

template <typename T>
RankModelFactory<T> distributed_llama_factory();

}  // namespace herd::train
