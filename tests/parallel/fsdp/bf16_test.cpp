// FSDP under `train.precision = bf16` (parallel/fsdp/flat_unit.h): the gathered weights are the bf16
// rounding of the fp32 master shards, and the gradients are reduce-scattered in fp32, as the Llama 3
// paper has it (section 3.3.2).
//
// The reduce-scatter test is built to fail if gradients were reduced in bf16: every rank's gradient is
// 1 + (r + 1) 2^-10, which bf16 (8 bits of precision: spacing 2^-7 at 1) rounds to 1, so a bf16
// reduction gives 4 over 4 ranks where the fp32 sum is 4 + 10 x 2^-10 exactly. A second test does the
// same with a real model's gradients (the shard must equal the fp32 sum of the ranks' accumulation
// buffers bit for bit, and their bf16 rounding must differ from it somewhere).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/comm_test_util.h"
#include "herd/nn/model.h"
#include "herd/parallel/dist_stage.h"
#include "herd/parallel/fsdp/flat_unit.h"
#include "parallel/model_test_util.h"

namespace herd::parallel::fsdp {
namespace {

using comm::testing::run_ranks;

TEST(FsdpBf16, GradientsAreReduceScatteredInFp32) {
  run_ranks(4, [](comm::Communicator& dp) -> Status {
    FlatUnit<float> unit("u", 37, dp, /*gather_bf16=*/true);  // 37: padded to 40, shards of 10
    unit.zero_grads();
    float* g = unit.full_grads();
    for (std::int64_t i = 0; i < unit.padded(); ++i) g[i] = i < unit.count() ? 1.0f + (dp.rank() + 1) * 0x1p-10f : 0.f;
    COMM_EXPECT(round_to_bf16(g[0]) == 1.0f);  // what a bf16 reduction would add
    unit.begin_reduce_scatter_grads();
    HERD_RETURN_IF_ERROR(unit.wait_grads());
    const float fp32_sum = 4.0f + 10 * 0x1p-10f;  // exact in fp32
    for (std::int64_t i = 0; i < unit.shard_size(); ++i) {
      const bool real = unit.shard_begin() + i < unit.count();
      COMM_EXPECT(unit.shard_grads()[i] == (real ? fp32_sum : 0.0f), "element ", unit.shard_begin() + i, ": ",
                  unit.shard_grads()[i], " is not the fp32 sum ", fp32_sum);
    }
    return Status::Ok();
  });
}

TEST(FsdpBf16, GatheredWeightsAreTheBf16RoundingOfEveryMasterShard) {
  for (int ranks : {1, 4}) {
    SCOPED_TRACE(ranks);
    run_ranks(ranks, [](comm::Communicator& dp) -> Status {
      FlatUnit<float> unit("u", 37, dp, true);
      auto master = [](std::int64_t j) { return 1.0f + static_cast<float>(j) * 0x1p-11f; };  // most not bf16 values
      for (std::int64_t i = 0; i < unit.shard_size(); ++i) {
        const std::int64_t j = unit.shard_begin() + i;
        unit.shard_params()[i] = j < unit.count() ? master(j) : 0.0f;
      }
      unit.params_updated();
      HERD_RETURN_IF_ERROR(unit.wait_gather());
      COMM_EXPECT(unit.full_params() == nullptr, "a bf16 unit has no fp32 gathered weights");
      const bf16* w = unit.full_params_bf16();
      COMM_EXPECT(w != nullptr);
      for (std::int64_t j = 0; j < unit.count(); ++j) {
        COMM_EXPECT(w[j].bits == float_to_bf16(master(j)), "element ", j);
      }
      unit.release();
      // The optimizer moves the master: the next gather carries the new rounding (a group of one
      // refreshes its kept copy).
      for (std::int64_t i = 0; i < unit.shard_size(); ++i) unit.shard_params()[i] += 0.5f;
      unit.params_updated();
      HERD_RETURN_IF_ERROR(unit.wait_gather());
      for (std::int64_t j = 0; j < unit.count(); ++j) {
        COMM_EXPECT(unit.full_params_bf16()[j].bits == float_to_bf16(master(j) + 0.5f), "element ", j);
      }
      unit.release();
      // Half the bytes of an fp32 gather: 2 per element of the gathered unit (or of a group of one's copy).
      const double gathered = dp.size() == 1 ? 2.0 * 37 : 2.0 * 40 + 4.0 * 40;  // + the fp32 full gradients
      COMM_EXPECT(unit.step_peak_bytes() == gathered + 16.0 * static_cast<double>(unit.shard_size()));
      return Status::Ok();
    });
  }
}

// A real model's gradients at dp = 2: each unit's reduced shard is exactly the fp32 sum of the two
// ranks' fp32 accumulation buffers, and rounding those to bf16 first would have changed it.
TEST(FsdpBf16, ModelGradientsAreTheFp32SumsOfTheRanksBuffers) {
  const model::LlamaConfig cfg = testing::small_gqa_model();
  const testing::Batch batch = testing::make_batch(4, 8, cfg.vocab, 5);
  testing::run_layout(1, 2, true, false, [&](ParallelContext ctx) -> Status {
    ctx.precision = Precision::kBF16;
    // The whole model as one stage, driven by hand: a backward that is not the step's last leaves the
    // gradients in the units' full buffers, unreduced.
    tp::TpCollectives<float> tpc(*ctx.tp, ctx.sequence_parallel);
    auto rope = std::make_shared<const kernels::RopeTable<float>>(nn::rope_config(cfg), cfg.max_seq_len);
    std::vector<int> layers(static_cast<std::size_t>(cfg.n_layers));
    for (int l = 0; l < cfg.n_layers; ++l) layers[static_cast<std::size_t>(l)] = l;
    DistributedStage<float> model(cfg, ctx, model::Recompute::kNone, layers, true, true, &tpc, nullptr, rope, true);
    model.init_weights(3);
    model.zero_grads();
    const nn::MicroBatch mb = batch.rows(2 * ctx.dp_rank(), 2);
    tensor::Arena arena(static_cast<std::size_t>(model.slot_bytes(2, 8)));
    std::vector<float> x(static_cast<std::size_t>(mb.rows() * cfg.hidden));
    HERD_ASSIGN_OR_RETURN(auto st, model.forward(arena, mb, x.data(), 0.02f, /*fuse_head=*/true));
    COMM_EXPECT(st.loss.count > 0);
    HERD_RETURN_IF_ERROR(model.backward(arena, mb, st, 0.02f, x.data(), /*last_of_step=*/false));
    std::int64_t differs = 0;
    for (std::int64_t u = 0; u < model.unit_count(); ++u) {
      FlatUnit<float>& unit = model.unit(u);
      const std::size_t n = static_cast<std::size_t>(unit.padded());
      std::vector<float> mine(unit.full_grads(), unit.full_grads() + n), both(2 * n);
      HERD_RETURN_IF_ERROR(ctx.dp->all_gather(mine.data(), both.data(), n, DType::kF32));
      unit.begin_reduce_scatter_grads();
      HERD_RETURN_IF_ERROR(unit.wait_grads());
      for (std::int64_t i = 0; i < unit.shard_size(); ++i) {
        const std::size_t j = static_cast<std::size_t>(unit.shard_begin() + i);
        const float want = both[j] + both[n + j];  // rank order, as the deterministic reduction sums
        COMM_EXPECT(unit.shard_grads()[i] == want, unit.name(), " element ", j, ": ", unit.shard_grads()[i],
                    " vs the fp32 sum ", want);
        differs += round_to_bf16(both[j]) + round_to_bf16(both[n + j]) != want;
      }
    }
    COMM_EXPECT(differs > 0, "no gradient where a bf16 reduction would differ: the test would not catch one");
    return Status::Ok();
  });
}

}  // namespace
}  // namespace herd::parallel::fsdp
