// Exact parameter counts per component.
//
// These are the sizes the runtime allocates (nn/ builds each weight from them), the planner's memory
// estimate starts from, and the MFU meter's 6N uses: one function, three consumers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/model/config.h"

namespace herd::model {

// One transformer layer. Biases are folded into their matrix's count (zero unless the config asks).
struct LayerParams {
  std::int64_t attn_norm = 0;  // RMSNorm weight (hidden), or LayerNorm weight + bias (2 x hidden)
  std::int64_t q = 0;          // hidden x (n_heads x head_dim)
  std::int64_t k = 0;          // hidden x (n_kv_heads x head_dim)
  std::int64_t v = 0;          // hidden x (n_kv_heads x head_dim)
  std::int64_t o = 0;          // (n_heads x head_dim) x hidden
  std::int64_t mlp_norm = 0;
  std::int64_t gate = 0;  // hidden x ffn_hidden (SwiGLU only)
  std::int64_t up = 0;    // hidden x ffn_hidden
  std::int64_t down = 0;  // ffn_hidden x hidden

  std::int64_t attention() const { return q + k + v + o; }
  std::int64_t mlp() const { return gate + up + down; }
  std::int64_t norms() const { return attn_norm + mlp_norm; }
  std::int64_t total() const { return attention() + mlp() + norms(); }
};

struct ModelParams {
  LayerParams layer;  // every layer is the same
  std::int64_t n_layers = 0;
  std::int64_t embedding = 0;           // vocab x hidden token embedding
  std::int64_t position_embedding = 0;  // max_seq_len x hidden ("position": "learned" only)
  std::int64_t final_norm = 0;
  std::int64_t output = 0;  // hidden x vocab head; 0 when tied to the embedding

  std::int64_t layers_total() const { return layer.total() * n_layers; }
  std::int64_t attention_total() const { return layer.attention() * n_layers; }
  std::int64_t mlp_total() const { return layer.mlp() * n_layers; }
  std::int64_t norms_total() const { return layer.norms() * n_layers + final_norm; }
  std::int64_t total() const { return layers_total() + embedding + position_embedding + final_norm + output; }
  // Parameters that multiply activations in a matmul: every linear, plus the output head (which is the
  // embedding matrix when tied). Lookups and norms do no matmul work.
  std::int64_t matmul_total(const LlamaConfig& cfg) const;
};

LayerParams layer_params(const LlamaConfig& cfg);
ModelParams model_params(const LlamaConfig& cfg);

// The shard one tensor-parallel rank holds (Megatron layout): q, k, v, gate and up are split by output
// columns (biases too), o and down by input rows (their biases stay whole on every rank), norms are
// replicated; the embedding and the output head are vocab-parallel, ceil(vocab / tp) rows each (the
// last rank's rows past vocab are padding). The caller checks model::check_shardable (shard.h) first.
LayerParams layer_params_tp_shard(const LlamaConfig& cfg, std::int64_t tp);
ModelParams model_params_tp_shard(const LlamaConfig& cfg, std::int64_t tp);

// Named components with their counts, in the order a report lists them.
struct NamedCount {
  std::string name;
  std::int64_t count;
};
std::vector<NamedCount> param_breakdown(const LlamaConfig& cfg);

}  // namespace herd::model
