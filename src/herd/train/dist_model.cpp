// Adapter from parallel::DistributedLlama to RankModel.
#include "herd/train/dist_model.h"

namespace herd::train {

template <typename T>
RankModelFactory<T> distributed_llama_factory() {
  return [](const parallel::ParallelContext& ctx, const model::LlamaConfig&,
            const TrainConfig&) -> Result<std::unique_ptr<RankModel<T>>> {
    return make_error("rank ", ctx.rank, ": the TP+FSDP model (parallel::DistributedLlama) is not in this build yet");
  };
}

template RankModelFactory<float> distributed_llama_factory<float>();
template RankModelFactory<double> distributed_llama_factory<double>();

}  // namespace herd::train
