// The collectives of one step, counted from the flight recorder, against docs/tp.md and docs/fsdp.md:
// per micro-batch one all-gather per FSDP unit (two for all but the head when resharded after
// forward), one gradient reduce-scatter per unit per step whatever the accumulation count, and the
// TP pair's counts with sequence parallelism on and off.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "parallel/model_test_util.h"

namespace herd::parallel {
namespace {

using namespace testing;  // NOLINT

using Counts = std::map<std::tuple<std::string, comm::OpKind>, int>;

Counts count_step(bool sp, bool reshard, int micro_batches) {
  const model::LlamaConfig cfg = small_gqa_model();
  const Batch batch = make_batch(4, 8, cfg.vocab, 9);
  Counts rank0;
  run_layout(2, 2, sp, reshard, [&](const ParallelContext& ctx) -> Status {
    HERD_ASSIGN_OR_RETURN(auto model_ptr, rank_model<double>(ctx, cfg, model::Recompute::kNone, 1, 8, micro_batches));
    RankModel<double>& model = *model_ptr;
    model.init_weights(2);
    const std::size_t before = ctx.tp->recorder().entries().size();
    model.zero_grads();
    std::vector<nn::MicroBatch> mbs;
    for (int m = 0; m < micro_batches; ++m) mbs.push_back(batch.rows(ctx.dp_rank() * 2 + m, 1));
    HERD_ASSIGN_OR_RETURN(auto loss, model.forward_backward_step(mbs, 0.01));
    COMM_EXPECT(loss.count >= 0);
    HERD_ASSIGN_OR_RETURN(const double norm, model.step(kernels::AdamWConfig{}, 1e-3, 1.0));
    COMM_EXPECT(norm > 0);
    if (ctx.rank == 0) {
      const auto entries = ctx.tp->recorder().entries();
      for (std::size_t i = before; i < entries.size(); ++i) ++rank0[{entries[i].group, entries[i].op}];
    }
    return Status::Ok();
  });
  return rank0;
}

TEST(Traffic, CollectivesPerStepMatchTheDocs) {
  const int L = static_cast<int>(small_gqa_model().n_layers), units = L + 2;
  using comm::OpKind;
  for (bool sp : {true, false}) {
    for (bool reshard : {false, true}) {
      SCOPED_TRACE(std::string(sp ? "sp" : "nosp") + (reshard ? " reshard" : ""));
      const int mbs = 2;
      Counts c = count_step(sp, reshard, mbs);
      // FSDP over dp: gathers per micro-batch, reduce-scatters once per step, the norm all-reduce.
      EXPECT_EQ((c[{"dp", OpKind::kAllGather}]), mbs * (reshard ? 2 * units - 1 : units));
      EXPECT_EQ((c[{"dp", OpKind::kReduceScatter}]), units);
      EXPECT_EQ((c[{"dp", OpKind::kAllReduce}]), 1);
      // TP per micro-batch: layers (SP: fwd 2 AG + 2 RS, bwd 4 AG + 2 RS; no SP: 2 AR fwd, 2 AR bwd),
      // embedding (reduce fwd, gather bwd), head (gather h, gather the loss stats, reduce dh).
      if (sp) {
        EXPECT_EQ((c[{"tp", OpKind::kAllGather}]), mbs * (6 * L + 1 + 2));
        EXPECT_EQ((c[{"tp", OpKind::kReduceScatter}]), mbs * (4 * L + 1 + 1));
        EXPECT_EQ((c[{"tp", OpKind::kAllReduce}]), (2 * L + 1) + 1);  // SP norm grads, grad norm
      } else {
        EXPECT_EQ((c[{"tp", OpKind::kAllGather}]), mbs * 1);  // the loss statistics
        EXPECT_EQ((c[{"tp", OpKind::kReduceScatter}]), 0);
        EXPECT_EQ((c[{"tp", OpKind::kAllReduce}]), mbs * (4 * L + 1 + 1) + 1);
      }
    }
  }
}

}  // namespace
}  // namespace herd::parallel
