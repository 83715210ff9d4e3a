// The local sizes a layer is built from, and where each weight sits in the layer's flat buffer.
//
// A layer never reads the global LlamaConfig: it is built from the sizes of its own shard, so a
// tensor-parallel rank builds the same class with heads / tp, kv_heads / tp and ffn / tp (and the
// planner's model/ functions size the same shard). Parameters and gradients of one layer live in one
// flat buffer each (FSDP shards and gathers per-layer flat units); weights are stored (out, in) row-major
// as PyTorch's nn.Linear does, so y = x W^T. The order q, k, v and gate, up keeps the fused projections
// contiguous: rows [0, q+2kv) of the q/k/v block are one (q+2kv, d) matrix.
#pragma once

#include <cstdint>

#include "herd/core/error.h"
#include "herd/model/config.h"
#include "herd/model/shard.h"

namespace herd::nn {

struct LayerSizes {
  std::int64_t hidden = 0;    // d (not sharded)
  std::int64_t heads = 0;     // local query heads
  std::int64_t kv_heads = 0;  // local KV heads
  std::int64_t head_dim = 0;
  std::int64_t ffn = 0;  // local MLP width
  double norm_eps = 1e-5;

  std::int64_t q_dim() const { return heads * head_dim; }
  std::int64_t kv_dim() const { return kv_heads * head_dim; }
};

// The sizes of one TP shard (tp = 1: the whole layer). Errors name the field that does not divide
// (model::check_shardable's wording).
inline Result<LayerSizes> layer_sizes(const model::LlamaConfig& cfg, std::int64_t tp = 1) {
  if (cfg.mlp != model::MlpKind::kSwiGLU || cfg.norm != model::NormKind::kRMSNorm ||
      cfg.position != model::PositionKind::kRoPE || cfg.attention_bias || cfg.mlp_bias) {
    return make_error("model '", cfg.name,
                      "': the runtime builds Llama 3 layers only (SwiGLU, RMSNorm, RoPE, no biases)");
  }
  // A layer cuts heads and the MLP width; the vocabulary is the stage's business.
  HERD_RETURN_IF_ERROR(model::check_shardable(cfg, model::ShardSpec{.tp = tp, .vocab_padded = true}));
  return LayerSizes{cfg.hidden, cfg.n_heads / tp, cfg.n_kv_heads / tp, cfg.head_dim, cfg.ffn_hidden / tp, cfg.norm_eps};
}

// Offsets (in elements) of each weight in a layer's flat buffer.
struct LayerLayout {
  std::int64_t attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down, total;

  explicit LayerLayout(const LayerSizes& s) {
    const std::int64_t d = s.hidden;
    attn_norm = 0;
    wq = attn_norm + d;
    wk = wq + s.q_dim() * d;
    wv = wk + s.kv_dim() * d;
    wo = wv + s.kv_dim() * d;
    mlp_norm = wo + d * s.q_dim();
    w_gate = mlp_norm + d;
    w_up = w_gate + s.ffn * d;
    w_down = w_up + s.ffn * d;
    total = w_down + d * s.ffn;
  }
};

}  // namespace herd::nn
