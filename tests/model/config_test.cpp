// LlamaConfig: presets, Hugging Face config.json loading and every malformed-file path.
#include "herd/model/config.h"

#include <gtest/gtest.h>

#include <string>

namespace herd::model {
namespace {

const std::string kFixtures = std::string(HERD_SOURCE_DIR) + "/tests/fixtures/hf/";

Json llama8b_json() { return *read_json_file(kFixtures + "llama3.1-8b.json"); }

std::string error_of(const Json& j) {
  Result<LlamaConfig> r = config_from_hf_json(j, "test");
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string() : r.error().message();
}

TEST(Config, PresetsMatchTheirHuggingFaceConfigs) {
  for (auto [preset_name, file] : {std::pair{"llama3-8b", "llama3.1-8b.json"},
                                   {"llama3-70b", "llama3.1-70b.json"},
                                   {"llama3-405b", "llama3.1-405b.json"}}) {
    LlamaConfig p = *preset(preset_name);
    LlamaConfig h = *load_hf_config(kFixtures + file);
    EXPECT_EQ(p.hidden, h.hidden) << preset_name;
    EXPECT_EQ(p.ffn_hidden, h.ffn_hidden);
    EXPECT_EQ(p.n_layers, h.n_layers);
    EXPECT_EQ(p.n_heads, h.n_heads);
    EXPECT_EQ(p.n_kv_heads, h.n_kv_heads);
    EXPECT_EQ(p.head_dim, h.head_dim);
    EXPECT_EQ(p.vocab, h.vocab);
    EXPECT_EQ(p.max_seq_len, h.max_seq_len);
    EXPECT_DOUBLE_EQ(p.rope_theta, h.rope_theta);
    EXPECT_DOUBLE_EQ(p.rope_scaling.factor, h.rope_scaling.factor);
    EXPECT_EQ(p.rope_scaling.original_max_position_embeddings, h.rope_scaling.original_max_position_embeddings);
    EXPECT_EQ(p.tie_embeddings, h.tie_embeddings);
  }
}

TEST(Config, Llama3OriginalHasNoRopeScaling) {
  LlamaConfig c = *load_hf_config(kFixtures + "llama3-8b.json");
  EXPECT_FALSE(c.rope_scaling.enabled());
  EXPECT_EQ(c.max_seq_len, 8192);
}

TEST(Config, GptStyleExtensionKeys) {
  LlamaConfig c = *load_hf_config(kFixtures + "gpt2-124m.json");
  EXPECT_EQ(c.mlp, MlpKind::kGeLU);
  EXPECT_EQ(c.norm, NormKind::kLayerNorm);
  EXPECT_EQ(c.position, PositionKind::kLearned);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.head_dim, 64);
}

TEST(Config, RoundTripsThroughHfJson) {
  for (const std::string& name : preset_names()) {
    LlamaConfig a = *preset(name);
    LlamaConfig b = *config_from_hf_json(config_to_hf_json(a), name);
    EXPECT_EQ(config_to_hf_json(a), config_to_hf_json(b)) << name;
  }
}

TEST(Config, MissingFieldIsNamed) {
  for (const char* field : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "vocab_size", "max_position_embeddings"}) {
    Json j = llama8b_json();
    j.erase(field);
    EXPECT_EQ(error_of(j), std::string(field) + ": missing; expected an integer") << field;
  }
}

TEST(Config, WrongTypeIsNamed) {
  Json j = llama8b_json();
  j["hidden_size"] = "4096";
  EXPECT_EQ(error_of(j), "hidden_size: expected an integer, got \"4096\"");
  j = llama8b_json();
  j["tie_word_embeddings"] = 1;
  EXPECT_EQ(error_of(j), "tie_word_embeddings: expected true or false, got 1");
  j = llama8b_json();
  j["rope_theta"] = "high";
  EXPECT_EQ(error_of(j), "rope_theta: expected a number, got \"high\"");
  j = llama8b_json();
  j["rope_scaling"].erase("factor");
  EXPECT_EQ(error_of(j), "rope_scaling.factor: missing; expected a number");
  j = llama8b_json();
  j["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_NE(error_of(j).find("rope_scaling.rope_type: only \"llama3\""), std::string::npos);
  j = llama8b_json();
  j["mlp"] = "relu";
  EXPECT_EQ(error_of(j), "mlp: expected \"swiglu\" or \"gelu\", got \"relu\"");
  EXPECT_EQ(error_of(Json::array()), "config: expected a JSON object, got []");
}

TEST(Config, HeadsMustDivideHidden) {
  Json j = llama8b_json();
  j["num_attention_heads"] = 30;
  j["num_key_value_heads"] = 10;
  EXPECT_EQ(error_of(j), "num_attention_heads (30) must divide hidden_size (4096), or give head_dim explicitly");
  j["head_dim"] = 128;  // explicit head_dim decouples the two (as in some Llama variants)
  EXPECT_TRUE(config_from_hf_json(j, "x").ok());
}

TEST(Config, KvHeadsMustDivideHeads) {
  Json j = llama8b_json();
  j["num_key_value_heads"] = 5;
  EXPECT_EQ(error_of(j), "num_key_value_heads (5) must divide num_attention_heads (32); choose a divisor of 32");
}

TEST(Config, NonPositiveValues) {
  Json j = llama8b_json();
  j["num_hidden_layers"] = 0;
  EXPECT_EQ(error_of(j), "num_hidden_layers: must be a positive integer, got 0");
  j = llama8b_json();
  j["vocab_size"] = -3;
  EXPECT_EQ(error_of(j), "vocab_size: must be a positive integer, got -3");
}

TEST(Config, ResolveModelErrors) {
  EXPECT_NE(resolve_model("llama4-1t").error().message().find("unknown model preset 'llama4-1t'"), std::string::npos);
  EXPECT_TRUE(resolve_model(kFixtures + "llama3.1-8b.json").ok());
  auto bad = load_hf_config("/nonexistent/config.json");
  EXPECT_EQ(bad.error().message(), "/nonexistent/config.json: cannot open file; check the path");
}

}  // namespace
}  // namespace herd::model
