#include "herd/model/params.h"

#include "herd/core/check.h"
#include "herd/model/shard.h"

namespace herd::model {

namespace {
std::int64_t norm_params(const LlamaConfig& c) { return c.norm == NormKind::kRMSNorm ? c.hidden : 2 * c.hidden; }
}  // namespace

LayerParams layer_params(const LlamaConfig& c) {
  LayerParams p;
  const std::int64_t ab = c.attention_bias ? 1 : 0;
  const std::int64_t mb = c.mlp_bias ? 1 : 0;
  p.attn_norm = norm_params(c);
  p.mlp_norm = norm_params(c);
  p.q = c.hidden * c.q_dim() + ab * c.q_dim();
  p.k = c.hidden * c.kv_dim() + ab * c.kv_dim();
  p.v = c.hidden * c.kv_dim() + ab * c.kv_dim();
  p.o = c.q_dim() * c.hidden + ab * c.hidden;
  p.up = c.hidden * c.ffn_hidden + mb * c.ffn_hidden;
  p.gate = c.mlp == MlpKind::kSwiGLU ? c.hidden * c.ffn_hidden + mb * c.ffn_hidden : 0;
  p.down = c.ffn_hidden * c.hidden + mb * c.hidden;
  return p;
}

ModelParams model_params(const LlamaConfig& c) {
  ModelParams m;
  m.layer = layer_params(c);
  m.n_layers = c.n_layers;
  m.embedding = c.vocab * c.hidden;
  m.position_embedding = c.position == PositionKind::kLearned ? c.max_seq_len * c.hidden : 0;
  m.final_norm = norm_params(c);
  m.output = c.tie_embeddings ? 0 : c.hidden * c.vocab;
  return m;
}

LayerParams layer_params_tp_shard(const LlamaConfig& c, std::int64_t tp) {
  const Status shardable = check_shardable(c, ShardSpec{.tp = tp, .vocab_padded = true});
  HERD_CHECK(shardable.ok(), shardable.error().message());
  const LayerParams full = layer_params(c);
  const std::int64_t ab = c.attention_bias ? 1 : 0;
  const std::int64_t mb = c.mlp_bias ? 1 : 0;
  LayerParams p;
  p.attn_norm = full.attn_norm;
  p.mlp_norm = full.mlp_norm;
  p.q = full.q / tp;
  p.k = full.k / tp;
  p.v = full.v / tp;
  p.o = c.q_dim() / tp * c.hidden + ab * c.hidden;
  p.gate = full.gate / tp;
  p.up = full.up / tp;
  p.down = c.ffn_hidden / tp * c.hidden + mb * c.hidden;
  return p;
}

ModelParams model_params_tp_shard(const LlamaConfig& c, std::int64_t tp) {
  ModelParams m = model_params(c);
  m.layer = layer_params_tp_shard(c, tp);
  const std::int64_t vocab_shard = (c.vocab + tp - 1) / tp;
  m.embedding = vocab_shard * c.hidden;
  m.output = c.tie_embeddings ? 0 : c.hidden * vocab_shard;
  return m;
}

std::int64_t ModelParams::matmul_total(const LlamaConfig& cfg) const {
  return (layer.attention() + layer.mlp()) * n_layers + cfg.hidden * cfg.vocab;
}

std::vector<NamedCount> param_breakdown(const LlamaConfig& c) {
  const ModelParams m = model_params(c);
  std::vector<NamedCount> rows = {{"embedding", m.embedding}};
  if (m.position_embedding) rows.push_back({"position embedding", m.position_embedding});
  rows.push_back({"attention q (all layers)", m.layer.q * m.n_layers});
  rows.push_back({"attention k (all layers)", m.layer.k * m.n_layers});
  rows.push_back({"attention v (all layers)", m.layer.v * m.n_layers});
  rows.push_back({"attention o (all layers)", m.layer.o * m.n_layers});
  if (m.layer.gate) rows.push_back({"mlp gate (all layers)", m.layer.gate * m.n_layers});
  rows.push_back({"mlp up (all layers)", m.layer.up * m.n_layers});
  rows.push_back({"mlp down (all layers)", m.layer.down * m.n_layers});
  rows.push_back({"norms (all layers)", m.layer.norms() * m.n_layers});
  rows.push_back({"final norm", m.final_norm});
  rows.push_back({c.tie_embeddings ? "output head (tied to embedding)" : "output head", m.output});
  return rows;
}

}  // namespace herd::model
