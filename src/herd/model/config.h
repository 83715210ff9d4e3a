// LlamaConfig: the architecture of one model, from a preset or a Hugging Face config.json.
//
// Llama 3 is a dense decoder: RMSNorm, RoPE, grouped-query attention and a SwiGLU MLP. Three extension
// keys describe the GPT-style transformers of many published runs with the same counting code:
// "mlp" ("swiglu": gate/up/down; "gelu": plain up/down of width intermediate_size), "norm"
// ("rmsnorm": weight only; "layernorm": weight and bias) and "position" ("rope"; "learned": a
// max_position_embeddings x hidden table). Hugging Face's own "attention_bias" and "mlp_bias" keys add
// the linear biases GPT-style models carry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/core/json.h"

namespace herd::model {

enum class MlpKind { kSwiGLU, kGeLU };
enum class NormKind { kRMSNorm, kLayerNorm };
enum class PositionKind { kRoPE, kLearned };

// Llama 3.1 "llama3" RoPE frequency scaling (factor 0 means none).
struct RopeScaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
  bool enabled() const { return factor > 0.0; }
};

struct LlamaConfig {
  std::string name;
  std::int64_t hidden = 0;       // d_model (hidden_size)
  std::int64_t ffn_hidden = 0;   // MLP width (intermediate_size)
  std::int64_t n_layers = 0;     // num_hidden_layers
  std::int64_t n_heads = 0;      // num_attention_heads
  std::int64_t n_kv_heads = 0;   // num_key_value_heads (GQA; == n_heads for multi-head attention)
  std::int64_t head_dim = 0;     // hidden / n_heads unless the config says otherwise
  std::int64_t vocab = 0;        // vocab_size
  std::int64_t max_seq_len = 0;  // max_position_embeddings
  double rope_theta = 500000.0;
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
  bool attention_bias = false;  // biases on q/k/v/o
  bool mlp_bias = false;        // biases on the MLP linears
  MlpKind mlp = MlpKind::kSwiGLU;
  NormKind norm = NormKind::kRMSNorm;
  PositionKind position = PositionKind::kRoPE;

  std::int64_t q_dim() const { return n_heads * head_dim; }
  std::int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

// Checks the relations every consumer relies on, and ceilings (each width and the vocabulary at most
// 2^24, layers and heads 2^16, positions 2^30, about 2^50 parameters in all) so that every count and
// byte figure derived from a configuration fits a signed 64-bit integer; the message names the field and
// the numbers.
Status validate(const LlamaConfig& cfg);

// Presets: llama3-8b, llama3-70b, llama3-405b (Llama 3.1 dimensions), and tiny (~10.5M) and small
// (~32.5M, the size of the PyTorch reference run) for CPU training; see docs/model.md.
std::vector<std::string> preset_names();
Result<LlamaConfig> preset(const std::string& name);

// Reads a Hugging Face config.json (a parsed object, or a file). Every missing or invalid field is
// an error naming it.
Result<LlamaConfig> config_from_hf_json(const Json& j, const std::string& name);
Result<LlamaConfig> load_hf_config(const std::string& path);

// A preset name, or else a path to a config.json.
Result<LlamaConfig> resolve_model(const std::string& name_or_path);

// The config as a Hugging Face-style JSON object (round-trips through config_from_hf_json).
Json config_to_hf_json(const LlamaConfig& cfg);

const char* mlp_name(MlpKind k);
const char* norm_name(NormKind k);
const char* position_name(PositionKind k);

}  // namespace herd::model
