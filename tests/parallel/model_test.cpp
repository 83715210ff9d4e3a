// DistributedLlama against nn::LlamaModel: one step's loss and every gathered gradient, for TP x DP
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
    DistributedLlama<double> model(cfg, ctx, lay.recompute, 1, 8);
    model.init_weights(11);
    model.zero_grads();
    const std::int64_t per_rank = 4 / lay.dp;
    double loss = 0;
    for (std::int64_t m = 0; m < per_rank; ++m) {
      HERD_ASSIGN_OR_RETURN(
          auto l, model.forward_backward(batch.rows(ctx.dp_rank() * per_rank + m, 1), scale, m == per_rank - 1));
      loss += l.loss_sum;
    }
    HERD_RETURN_IF_ERROR(ctx.dp->all_reduce<double>(&loss, 1, comm::ReduceOp::kSum));
    COMM_EXPECT(std::abs(loss - ref_loss) <= 1e-10 * std::abs(ref_loss), "loss ", loss, " vs ", ref_loss);
    HERD_ASSIGN_OR_RETURN(auto w, model.gather_full_weights());
    HERD_ASSIGN_OR_RETURN(auto g, model.gather_full_grads());
    for (const nn::NamedParam& p : ref.named_params()) {
      COMM_EXPECT(rel_diff(w, ref.params(), p) == 0, "weights differ: ", p.name);
      const double r = rel_diff(g, ref.grads(), p);
      COMM_EXPECT(r <= 1e-10, "gradient of ", p.name, " differs by ", r, " relative");
    }
    return Status::Ok();
  });
}

TEST(DistributedLlama, SingleRankEqualsLlamaModel) {
  check_gradient_parity({1, 1, true, false, model::Recompute::kNone});
}

TEST(DistributedLlama, TensorParallelWithSequenceParallelism) {
  check_gradient_parity({2, 1, true, false, model::Recompute::kNone});
  check_gradient_parity({4, 1, true, false, model::Recompute::kSelective});
}

TEST(DistributedLlama, TensorParallelWithoutSequenceParallelism) {
  check_gradient_parity({2, 1, false, false, model::Recompute::kNone});
  check_gradient_parity({4, 1, false, false, model::Recompute::kFull});
}

TEST(DistributedLlama, FsdpAlone) {
  check_gradient_parity({1, 2, true, false, model::Recompute::kNone});
  check_gradient_parity({1, 4, true, true, model::Recompute::kNone});
}

TEST(DistributedLlama, TensorParallelTimesFsdp) {
  check_gradient_parity({2, 2, true, true, model::Recompute::kSelective});
  check_gradient_parity({2, 2, false, false, model::Recompute::kNone});
  check_gradient_parity({4, 2, true, false, model::Recompute::kFull});
}

TEST(DistributedLlama, ValidateLayoutNamesTheNumbers) {
  const model::LlamaConfig cfg = small_gqa_model();  // 8 heads, 4 kv heads, ffn 32, vocab 32
  auto dims = [](std::int64_t tp, std::int64_t dp) { return *topology::ParallelDims::make(tp, 1, 1, dp); };
  EXPECT_TRUE(validate_layout(cfg, dims(4, 2), 8, 4, 8, true).ok());
  auto msg = [](const Status& s) { return s.ok() ? std::string("ok") : s.error().message(); };
  EXPECT_NE(msg(validate_layout(cfg, dims(2, 2), 8, 4, 8, true)).find("= 4 ranks, but the job has 8"),
            std::string::npos);
  EXPECT_NE(
      msg(validate_layout(cfg, dims(8, 1), 8, 4, 8, true)).find("num_key_value_heads (4) is not divisible by tp (8)"),
      std::string::npos);
  model::LlamaConfig c2 = cfg;
  c2.n_heads = 12;
  c2.n_kv_heads = 12;
  EXPECT_NE(msg(validate_layout(c2, dims(8, 1), 8, 4, 8, true)).find("num_attention_heads (12)"), std::string::npos);
  c2 = cfg;
  c2.vocab = 30;
  EXPECT_NE(msg(validate_layout(c2, dims(4, 1), 4, 4, 8, true)).find("vocab_size (30) is not divisible by tp (4)"),
            std::string::npos);
  EXPECT_NE(msg(validate_layout(cfg, dims(1, 4), 4, 6, 8, true))
                .find("global batch (6 sequences) is not divisible by dp (4)"),
            std::string::npos);
  EXPECT_NE(
      msg(validate_layout(cfg, dims(4, 1), 4, 4, 6, true)).find("seq_len / cp (6 / 1 = 6) is not divisible by tp (4)"),
      std::string::npos);
  EXPECT_TRUE(validate_layout(cfg, dims(4, 1), 4, 4, 6, false).ok());
}

// The tensors a TP layer keeps are exactly model/activations.h's list at tp = 2, with and without SP.
TEST(DistributedLlama, SavedActivationsMatchThePlanner) {
  const model::LlamaConfig cfg = small_gqa_model();
  for (bool sp : {true, false}) {
    for (model::Recompute rc : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
      const Batch batch = make_batch(2, 8, cfg.vocab, 3);
      run_layout(2, 1, sp, false, [&](const ParallelContext& ctx) -> Status {
        DistributedLlama<double> model(cfg, ctx, rc, 2, 8);
        model.init_weights(1);
        model.zero_grads();
        HERD_ASSIGN_OR_RETURN(auto loss, model.forward_backward(batch.rows(0, 2), 0.01, true));
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
          const std::int64_t peak = static_cast<std::int64_t>(model.arena().tag_peak("layers.1." + t.name));
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
