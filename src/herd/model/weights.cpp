#include "herd/model/weights.h"

#include <cmath>

#include "herd/core/check.h"
#include "herd/model/shard.h"

namespace herd::model {

double init_std(WeightInit init, const LlamaConfig& cfg) {
  switch (init) {
    case WeightInit::kOnes: return 0.0;
    case WeightInit::kEmbedding: return 1.0;
    case WeightInit::kLinear: return 0.02;
    case WeightInit::kResidual: return 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layers));
    case WeightInit::kOutput: return 1.0 / std::sqrt(static_cast<double>(cfg.hidden));
  }
  return 0.0;
}

TpBlock tp_block(const Weight& w, std::int64_t tp, std::int64_t rank) {
  HERD_CHECK(tp >= 1 && rank >= 0 && rank < tp, "TP rank ", rank, " outside tp (", tp, ")");
  TpBlock b{0, w.rows, 0, w.cols};
  if (w.split == TpSplit::kRows) {
    b.r0 = rank * (w.rows / tp);
    b.r1 = b.r0 + w.rows / tp;
  } else if (w.split == TpSplit::kCols) {
    b.c0 = rank * (w.cols / tp);
    b.c1 = b.c0 + w.cols / tp;
  }
  return b;
}

std::vector<Weight> llama_weights(const LlamaConfig& c, std::int64_t tp) {
  HERD_CHECK(c.mlp == MlpKind::kSwiGLU && c.norm == NormKind::kRMSNorm && c.position == PositionKind::kRoPE &&
                 !c.attention_bias && !c.mlp_bias,
             "model '", c.name, "': the weight table describes Llama 3 models only");
  const Status shardable = check_shardable(c, ShardSpec{.tp = tp});
  HERD_CHECK(shardable.ok(), shardable.error().message());
  const std::int64_t d = c.hidden, V = c.vocab, q = c.q_dim(), kv = c.kv_dim(), f = c.ffn_hidden;
  std::vector<Weight> out;
  std::int64_t offset = 0, local_offset = 0;
  int unit_index = -1;
  std::string unit;
  auto begin_unit = [&](std::string name) {
    unit = std::move(name);
    ++unit_index;
    local_offset = 0;
  };
  auto add = [&](std::string name, std::int64_t rows, std::int64_t cols, TpSplit split, WeightInit init) {
    Weight w;
    w.name = std::move(name);
    w.unit = unit;
    w.unit_index = unit_index;
    w.rows = rows;
    w.cols = cols;
    w.split = split;
    w.init = init;
    w.offset = offset;
    const TpBlock b = tp_block(w, tp, 0);
    w.local_rows = b.rows();
    w.local_cols = b.cols();
    w.local_offset = local_offset;
    offset += w.count();
    local_offset += w.local_count();
    out.push_back(std::move(w));
  };
  begin_unit("embedding");
  add("tok_embedding", V, d, TpSplit::kRows, WeightInit::kEmbedding);
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l);
    begin_unit(p);
    add(p + ".attn_norm", d, 1, TpSplit::kReplicated, WeightInit::kOnes);
    add(p + ".wq", q, d, TpSplit::kRows, WeightInit::kLinear);
    add(p + ".wk", kv, d, TpSplit::kRows, WeightInit::kLinear);
    add(p + ".wv", kv, d, TpSplit::kRows, WeightInit::kLinear);
    add(p + ".wo", d, q, TpSplit::kCols, WeightInit::kResidual);
    add(p + ".mlp_norm", d, 1, TpSplit::kReplicated, WeightInit::kOnes);
    add(p + ".w_gate", f, d, TpSplit::kRows, WeightInit::kLinear);
    add(p + ".w_up", f, d, TpSplit::kRows, WeightInit::kLinear);
    add(p + ".w_down", d, f, TpSplit::kCols, WeightInit::kResidual);
  }
  begin_unit("head");
  add("final_norm", d, 1, TpSplit::kReplicated, WeightInit::kOnes);
  add("output", V, d, TpSplit::kRows, WeightInit::kOutput);
  return out;
}

const char* weight_group(const std::string& name) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (name == "tok_embedding") return "embedding";
  if (name == "output") return "output";
  if (ends_with("norm")) return "norm";
  if (ends_with(".wq") || ends_with(".wk") || ends_with(".wv") || ends_with(".wo")) return "attention";
  if (ends_with(".w_gate") || ends_with(".w_up") || ends_with(".w_down")) return "mlp";
  return "other";
}

std::vector<WeightUnit> llama_weight_units(const std::vector<Weight>& weights) {
  std::vector<WeightUnit> units;
  for (const Weight& w : weights) {
    if (units.empty() || units.back().name != w.unit) units.push_back({w.unit, w.offset, 0, 0});
    units.back().count += w.count();
    units.back().local_count += w.local_count();
  }
  return units;
}

}  // namespace herd::model
