// RankModel at pp = 1 against nn::LlamaModel: one step's loss and every gathered gradient, for TP x DP
// layouts with sequence parallelism on and off, in double; the layout validation; and the saved
// activations of a TP layer against model::layer_activation_bytes.
#include <gtest/gtest.h>

#include <string>

#include "herd/model/activations.h"
#include "parallel/model_test_util.h"

namespace herd::parallel {
namespace {

using namespace testing;  // NOLINT

struct Layout {
  std::int64_t tp, dp;
  bool sp, reshard;
  model::Recompute recompute;
};

std::string name(const Layout& l) {
  return "tp" + std::to_string(l.tp) + " dp" + std::to_string(l.dp) + (l.sp ? " sp" : " nosp") +
         (l.reshard ? " reshard" : "") + " recompute " + std::to_string(static_cast<int>(l.recompute));
}

// One step of 4 sequences of 8 tokens: the single-rank model in 2 micro-batches of 2; each DP rank
// its 4/dp sequences one per micro-batch.
void check_gradient_parity(const Layout& lay) {
  SCOPED_TRACE(name(lay));
  const model::LlamaConfig cfg = small_gqa_model();
  const Batch batch = make_batch(4, 8, cfg.vocab, 7);
  const double scale = 1.0 / static_cast<double>(batch.real_tokens());
  nn::LlamaModel<double> ref(cfg, lay.recompute, 2, 8);
  ref.init_weights(11);
  double ref_loss = 0;
  for (int m = 0; m < 2; ++m) ref_loss += ref.forward_backward(batch.rows(2 * m, 2), scale).loss_sum;

  run_layout(lay.tp, lay.dp, lay.sp, lay.reshard, [&](const ParallelContext& ctx) -> Status {
    const std::int64_t per_rank = 4 / lay.dp;
    HERD_ASSIGN_OR_RETURN(auto model_ptr,
                          rank_model<double>(ctx, cfg, lay.recompute, 1, 8, static_cast<int>(per_rank)));
    RankModel<double>& model = *model_ptr;
    model.init_weights(11);
    model.zero_grads();
    std::vector<nn::MicroBatch> mbs;
    for (std::int64_t m = 0; m < per_rank; ++m) mbs.push_back(batch.rows(ctx.dp_rank() * per_rank + m, 1));
    HERD_ASSIGN_OR_RETURN(auto l, model.forward_backward_step(mbs, scale));
    double loss = l.loss_sum;
    HERD_RETURN_IF_ERROR(ctx.dp->all_reduce<double>(&loss, 1, comm::ReduceOp::kSum));
    COMM_EXPECT(std::abs(loss - ref_loss) <= 1e-10 * std::abs(ref_loss), "loss ", loss, " vs ", ref_loss);
    HERD_ASSIGN_OR_RETURN(auto w, model.gather_full(false));
    HERD_ASSIGN_OR_RETURN(auto g, model.gather_full(true));
    for (const nn::NamedParam& p : ref.named_params()) {
      COMM_EXPECT(rel_diff(w, ref.params(), p) == 0, "weights differ: ", p.name);
      const double r = rel_diff(g, ref.grads(), p);
      COMM_EXPECT(r <= 1e-10, "gradient of ", p.name, " differs by ", r, " relative");
    }
    return Status::Ok();
  });
}

TEST(RankModel, SingleRankEqualsLlamaModel) { check_gradient_parity({1, 1, true, false, model::Recompute::kNone}); }

TEST(RankModel, TensorParallelWithSequenceParallelism) {
  check_gradient_parity({2, 1, true, false, model::Recompute::kNone});
  check_gradient_parity({4, 1, true, false, model::Recompute::kSelective});
}

TEST(RankModel, TensorParallelWithoutSequenceParallelism) {
  check_gradient_parity({2, 1, false, false, model::Recompute::kNone});
  check_gradient_parity({4, 1, false, false, model::Recompute::kFull});
}

TEST(RankModel, FsdpAlone) {
  check_gradient_parity({1, 2, true, false, model::Recompute::kNone});
  check_gradient_parity({1, 4, true, true, model::Recompute::kNone});
}

TEST(RankModel, TensorParallelTimesFsdp) {
  check_gradient_parity({2, 2, true, true, model::Recompute::kSelective});
  check_gradient_parity({2, 2, false, false, model::Recompute::kNone});
  check_gradient_parity({4, 2, true, false, model::Recompute::kFull});
}

// The tensors a TP layer keeps are exactly model/activations.h's list at tp = 2, with and without SP.
TEST(RankModel, SavedActivationsMatchThePlanner) {
  const model::LlamaConfig cfg = small_gqa_model();
  for (bool sp : {true, false}) {
    for (model::Recompute rc : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
      const Batch batch = make_batch(2, 8, cfg.vocab, 3);
      run_layout(2, 1, sp, false, [&](const ParallelContext& ctx) -> Status {
        HERD_ASSIGN_OR_RETURN(auto model_ptr, rank_model<double>(ctx, cfg, rc, 2, 8));
        RankModel<double>& model = *model_ptr;
        model.init_weights(1);
        model.zero_grads();
        HERD_ASSIGN_OR_RETURN(auto loss, model.forward_backward_step({batch.rows(0, 2)}, 0.01));
        COMM_EXPECT(loss.count > 0);
        model::ActivationShape s;
        s.seq_len = 8;
        s.micro_batch = 2;
        s.dtype = DType::kF64;
        s.tp = 2;
        s.sequence_parallel = sp;
        s.recompute = rc;
        std::int64_t bytes = 0;
        for (const model::SavedTensor& t : model::layer_saved_tensors(cfg, s)) {
          const std::int64_t peak = static_cast<std::int64_t>(model.executor().slot(0).tag_peak("layers.1." + t.name));
          COMM_EXPECT(peak == t.bytes(), t.name, ": arena ", peak, " vs planner ", t.bytes());
          bytes += peak;
        }
        COMM_EXPECT(bytes == model::layer_activation_bytes(cfg, s));
        return Status::Ok();
      });
    }
  }
}

}  // namespace
}  // namespace herd::parallel
