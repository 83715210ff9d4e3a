// Activation bytes against an independent closed form and the sharding rules.
#include "herd/model/activations.h"

#include <gtest/gtest.h>

namespace herd::model {
namespace {

// Closed form for a Llama layer with no parallelism, bf16, fp32 statistics (docs/activations.md):
//   none:      B T (6d + 2 kv + 3 f) x 2 bytes + B T (2 + n_heads) x 4 bytes
//   selective: B T (4d + 2 kv + 2 f) x 2 bytes + B T (2 + n_heads) x 4 bytes
//   full:      B T d x 2 bytes
std::int64_t closed_form(const LlamaConfig& c, std::int64_t b, std::int64_t t, Recompute r) {
  const std::int64_t d = c.hidden, kv = c.kv_dim(), f = c.ffn_hidden;
  switch (r) {
    case Recompute::kNone: return b * t * (6 * d + 2 * kv + 3 * f) * 2 + b * t * (2 + c.n_heads) * 4;
    case Recompute::kSelective: return b * t * (4 * d + 2 * kv + 2 * f) * 2 + b * t * (2 + c.n_heads) * 4;
    case Recompute::kFull: return b * t * d * 2;
  }
  return 0;
}

TEST(Activations, ClosedFormWithoutParallelism) {
  for (const char* name : {"llama3-8b", "llama3-70b", "small"}) {
    LlamaConfig c = *preset(name);
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      ActivationShape s;
      s.seq_len = 4096;
      s.micro_batch = 2;
      s.recompute = r;
      EXPECT_EQ(layer_activation_bytes(c, s), closed_form(c, 2, 4096, r)) << name << " " << recompute_name(r);
    }
  }
}

TEST(Activations, TensorParallelShardsHeadsAndMlp) {
  LlamaConfig c = *preset("llama3-70b");
  ActivationShape s;
  s.seq_len = 8192;
  s.sequence_parallel = true;
  const std::int64_t one = layer_activation_bytes(c, s);
  s.tp = 8;
  // With sequence parallelism every kept tensor is split 8 ways: norm regions along T, the rest by heads.
  EXPECT_EQ(layer_activation_bytes(c, s) * 8, one);
  s.sequence_parallel = false;
  // Without it the norm inputs and outputs (4 x B T d) and their statistics are replicated on each rank.
  const std::int64_t replicated = 4 * 8192 * c.hidden * 2 + 2 * 8192 * 4;
  EXPECT_EQ(layer_activation_bytes(c, s), (one - replicated) / 8 + replicated);
}

TEST(Activations, ContextParallelSplitsTheSequence) {
  LlamaConfig c = *preset("llama3-405b");
  ActivationShape s;
  s.seq_len = 131072;
  s.tp = 8;
  const std::int64_t no_cp = layer_activation_bytes(c, s);
  s.cp = 16;
  EXPECT_EQ(layer_activation_bytes(c, s) * 16, no_cp);
}

TEST(Activations, RecomputeOrdersMemory) {
  LlamaConfig c = *preset("small");
  ActivationShape s;
  s.seq_len = 512;
  s.recompute = Recompute::kNone;
  const std::int64_t none = layer_activation_bytes(c, s);
  s.recompute = Recompute::kSelective;
  const std::int64_t sel = layer_activation_bytes(c, s);
  s.recompute = Recompute::kFull;
  const std::int64_t full = layer_activation_bytes(c, s);
  EXPECT_GT(none, sel);
  EXPECT_GT(sel, full);
  EXPECT_EQ(recompute_working_bytes(c, s), none);
}

TEST(Activations, ScalingBookCheckpointsFor70B) {
  // Two bf16 checkpoints of (T, d) per layer over a 4M-token batch: 2 * 8192 * 4e6 * 2 * 80 ~ 10.5 TB.
  // herd's full-recompute policy keeps one checkpoint per layer (the layer input): half of that.
  LlamaConfig c = *preset("llama3-70b");
  ActivationShape s;
  s.seq_len = 4096;
  s.micro_batch = 1024;
  s.recompute = Recompute::kFull;
  const double total = static_cast<double>(layer_activation_bytes(c, s)) * 80;
  EXPECT_NEAR(2 * total, 10.5e12 * 4194304.0 / 4e6, 0.1e12);
}

TEST(Activations, ShapeValidation) {
  LlamaConfig c = *preset("llama3-8b");
  ActivationShape s;
  s.tp = 16;
  EXPECT_EQ(validate_activation_shape(c, s).error().message(),
            "num_key_value_heads (8) is not divisible by tp (16); choose a tp that divides 8");
  s.tp = 1;
  s.seq_len = 100;
  s.cp = 8;
  EXPECT_EQ(validate_activation_shape(c, s).error().message(),
            "seq_len (100) is not divisible by 2 x cp (16): context parallelism cuts each sequence into 2 x cp chunks; "
            "use a multiple of 16");
}

TEST(Activations, OutputStageKeepsNoLogits) {
  LlamaConfig c = *preset("llama3-8b");
  ActivationShape s;
  s.seq_len = 8192;
  // Far smaller than one bf16 copy of the (T, vocab) logits.
  EXPECT_LT(output_activation_bytes(c, s), 8192LL * c.vocab * 2 / 10);
  EXPECT_EQ(embedding_activation_bytes(c, s), 8192 * 4);
}

}  // namespace
}  // namespace herd::model
