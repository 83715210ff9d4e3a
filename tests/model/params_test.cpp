// Parameter counts against the published totals and an independent closed form.
#include "herd/model/params.h"

#include <gtest/gtest.h>

namespace herd::model {
namespace {

const std::string kHfConfigs = std::string(HERD_SOURCE_DIR) + "/tests/fixtures/hf/";

TEST(Params, PublishedLlama3Totals) {
  EXPECT_EQ(model_params(*preset("llama3-8b")).total(), 8030261248);
  EXPECT_EQ(model_params(*preset("llama3-70b")).total(), 70553706496);
  EXPECT_EQ(model_params(*preset("llama3-405b")).total(), 405853388800);
  EXPECT_EQ(model_params(*load_hf_config(kHfConfigs + "llama3.1-8b.json")).total(), 8030261248);
  EXPECT_EQ(model_params(*load_hf_config(kHfConfigs + "llama3.1-70b.json")).total(), 70553706496);
  EXPECT_EQ(model_params(*load_hf_config(kHfConfigs + "llama3.1-405b.json")).total(), 405853388800);
}

TEST(Params, ScalingBookBreakdownFor70B) {
  // How to Scale Your Model, "Training LLaMA 3": MLP ~56.3e9, attention ~12e9, vocab ~2.1e9 (two tables).
  ModelParams p = model_params(*preset("llama3-70b"));
  EXPECT_NEAR(static_cast<double>(p.mlp_total()), 56.4e9, 0.1e9);
  EXPECT_NEAR(static_cast<double>(p.attention_total()), 12.1e9, 0.1e9);
  EXPECT_NEAR(static_cast<double>(p.embedding), 1.05e9, 0.01e9);
  EXPECT_EQ(p.embedding, p.output);
}

TEST(Params, ClosedFormForLlama) {
  // Independent closed form: L (d (2 q + 2 kv) + 3 d f + 2 d) + 2 V d + d, q = heads*head_dim.
  for (const std::string& name : preset_names()) {
    LlamaConfig c = *preset(name);
    const std::int64_t d = c.hidden, f = c.ffn_hidden, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
    const std::int64_t expected = c.n_layers * (d * (2 * q + 2 * kv) + 3 * d * f + 2 * d) + 2 * c.vocab * d + d;
    EXPECT_EQ(model_params(c).total(), expected) << name;
  }
}

TEST(Params, TiedEmbeddingsCountOnce) {
  LlamaConfig c = *preset("tiny");
  const std::int64_t untied = model_params(c).total();
  c.tie_embeddings = true;
  EXPECT_EQ(model_params(c).total(), untied - c.vocab * c.hidden);
  EXPECT_EQ(model_params(c).output, 0);
}

TEST(Params, Gpt2IsExactly124439808) {
  // GPT-2 small: biases everywhere, LayerNorm, GeLU MLP, learned positions, tied head.
  EXPECT_EQ(model_params(*load_hf_config(kHfConfigs + "gpt2-124m.json")).total(), 124439808);
}

TEST(Params, SmallPresetsAreDocumentedSizes) {
  EXPECT_NEAR(static_cast<double>(model_params(*preset("tiny")).total()), 10.5e6, 0.2e6);
  EXPECT_NEAR(static_cast<double>(model_params(*preset("small")).total()), 32.5e6, 0.1e6);
}

TEST(Params, BreakdownSumsToTotal) {
  for (const std::string& name : preset_names()) {
    LlamaConfig c = *preset(name);
    std::int64_t sum = 0;
    for (const auto& row : param_breakdown(c)) sum += row.count;
    EXPECT_EQ(sum, model_params(c).total()) << name;
  }
}

}  // namespace
}  // namespace herd::model
