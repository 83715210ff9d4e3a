// FLOPs per token against brute-force counts over explicit matmul shapes and mask entries.
#include "herd/model/flops.h"

#include <gtest/gtest.h>

#include "herd/model/params.h"

namespace herd::model {
namespace {

// Brute force: visit every (query, key) entry of the mask.
double count_pairs(std::int64_t t, const AttentionMask& m) {
  std::vector<std::int64_t> doc(static_cast<std::size_t>(t), 0);
  if (m.kind == MaskKind::kDocument) {
    std::size_t i = 0;
    for (std::size_t d = 0; d < m.doc_lengths.size(); ++d)
      for (std::int64_t k = 0; k < m.doc_lengths[d]; ++k) doc[i++] = static_cast<std::int64_t>(d);
  }
  double n = 0;
  for (std::int64_t q = 0; q < t; ++q)
    for (std::int64_t k = 0; k < t; ++k) {
      if (m.kind == MaskKind::kFull)
        n += 1;
      else if (k <= q && doc[static_cast<std::size_t>(k)] == doc[static_cast<std::size_t>(q)])
        n += 1;
    }
  return n;
}

TEST(Flops, AttentionPairsMatchBruteForce) {
  EXPECT_EQ(*attention_pairs(37, AttentionMask::causal()), count_pairs(37, AttentionMask::causal()));
  EXPECT_EQ(*attention_pairs(37, AttentionMask::full()), count_pairs(37, AttentionMask::full()));
  auto docs = AttentionMask::documents({5, 1, 20, 11});
  EXPECT_EQ(*attention_pairs(37, docs), count_pairs(37, docs));
  // Packing documents strictly reduces attention work against one causal sequence.
  EXPECT_LT(*attention_pairs(37, docs), *attention_pairs(37, AttentionMask::causal()));
}

TEST(Flops, BadMasks) {
  EXPECT_EQ(attention_pairs(10, AttentionMask::documents({4, 4})).error().message(),
            "document lengths sum to 8 but the sequence has 10 tokens; pack documents to fill the sequence exactly");
  EXPECT_FALSE(attention_pairs(10, AttentionMask::documents({12, -2})).ok());
  EXPECT_FALSE(attention_pairs(0, AttentionMask::causal()).ok());
}

TEST(Flops, ForwardMatchesExplicitMatmulShapes) {
  LlamaConfig c = *preset("small");
  const std::int64_t t = 64;
  // Per token: each (in x out) linear is 2*in*out; per layer q, k, v, o, gate, up, down; then the head.
  const double d = c.hidden, f = c.ffn_hidden, q = c.q_dim(), kv = c.kv_dim();
  const double per_layer = 2 * (d * q + 2 * d * kv + q * d) + 2 * 3 * d * f;
  const double expected_matmul = per_layer * c.n_layers + 2 * d * c.vocab;
  ForwardFlops fwd = *forward_flops_per_token(c, t, AttentionMask::causal());
  EXPECT_DOUBLE_EQ(fwd.matmul(), expected_matmul);
  // Scores and weighted values: 2 matmuls x 2 FLOPs x head_dim, per head, per allowed pair.
  const double pairs = count_pairs(t, AttentionMask::causal());
  EXPECT_DOUBLE_EQ(fwd.attention_core, 2 * 2 * c.head_dim * c.n_heads * pairs / t * c.n_layers);
}

TEST(Flops, ScalingBook70B) {
  // "roughly 6 * param count FLOPs per token ... 6 * 70e9 = 4.2e11".
  LlamaConfig c = *preset("llama3-70b");
  const double six_n = 6.0 * static_cast<double>(model_params(c).total());
  EXPECT_NEAR(six_n, 4.2e11, 0.05e11);
  // The attention term at 4K adds about 3%: 6 * L * h * (T+1).
  const double with_attn = *train_model_flops_per_token(c, 4096, AttentionMask::causal());
  EXPECT_DOUBLE_EQ(with_attn - six_n, 6.0 * 80 * 8192 * 4097);
  // 15T tokens: 6.3e24 FLOPs.
  EXPECT_NEAR(six_n * 15e12, 6.3e24, 0.1e24);
}

TEST(Flops, ValidationFileConventionFor405B) {
  // tests/fixtures/validation/public-cases.json derives tokens/s from 6N + 6*L*h*s: 430 TFLOP/s -> 169.5 tokens/s per
  // GPU.
  LlamaConfig c = *preset("llama3-405b");
  const double f = *train_model_flops_per_token(c, 8192, AttentionMask::causal());
  EXPECT_NEAR(430e12 / f, 169.5, 0.1);
}

TEST(Flops, ConventionsAndRecompute) {
  LlamaConfig c = *preset("llama3-8b");
  auto m = AttentionMask::causal();
  const double exact = *train_model_flops_per_token(c, 8192, m, FlopConvention::kExact);
  const ForwardFlops fwd = *forward_flops_per_token(c, 8192, m);
  EXPECT_DOUBLE_EQ(exact, 3 * fwd.total());
  const double none = *train_hardware_flops_per_token(c, 8192, m, Recompute::kNone);
  const double sel = *train_hardware_flops_per_token(c, 8192, m, Recompute::kSelective);
  const double full = *train_hardware_flops_per_token(c, 8192, m, Recompute::kFull);
  EXPECT_DOUBLE_EQ(none, exact + 0.5 * fwd.attention_core);
  EXPECT_DOUBLE_EQ(sel, none);
  // Full recompute runs every layer's forward twice: hardware ~ 8N-style (the scaling book's remark).
  EXPECT_DOUBLE_EQ(full - none, fwd.attention_linear + fwd.mlp + fwd.attention_core);
  EXPECT_NEAR(full / exact, 4.0 / 3.0, 0.05);
}

TEST(Flops, RecomputeNamesRoundTrip) {
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    EXPECT_EQ(*parse_recompute(recompute_name(r)), r);
  }
  EXPECT_EQ(parse_recompute("some").error().message(), "recompute: expected none, selective or full, got 'some'");
}

}  // namespace
}  // namespace herd::model
