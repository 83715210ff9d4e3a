// Per-TP-shard parameter counts: the shards of the split matrices add up to the whole model.
#include <gtest/gtest.h>

#include "herd/model/params.h"

namespace herd::model {
namespace {

TEST(ParamsShard, ShardsSumToTheFullLayer) {
  for (const char* name : {"llama3-8b", "llama3-70b", "llama3-405b", "tiny"}) {
    LlamaConfig cfg = *preset(name);
    for (std::int64_t tp : {1, 2, 4, 8}) {
      if (cfg.n_kv_heads % tp != 0) continue;
      const LayerParams full = layer_params(cfg), s = layer_params_tp_shard(cfg, tp);
      EXPECT_EQ(s.attention() * tp, full.attention()) << name << " tp" << tp;
      EXPECT_EQ(s.mlp() * tp, full.mlp()) << name << " tp" << tp;
      EXPECT_EQ(s.norms(), full.norms());  // replicated
      const ModelParams m = model_params_tp_shard(cfg, tp);
      EXPECT_GE(m.embedding * tp, model_params(cfg).embedding);
      EXPECT_LT(m.embedding * tp - model_params(cfg).embedding, tp * cfg.hidden);  // padding only
    }
  }
}

TEST(ParamsShard, RowParallelBiasStaysWhole) {
  LlamaConfig cfg = *preset("tiny");
  cfg.attention_bias = true;
  cfg.mlp_bias = true;
  const LayerParams s = layer_params_tp_shard(cfg, 2);
  EXPECT_EQ(s.o, cfg.q_dim() / 2 * cfg.hidden + cfg.hidden);
  EXPECT_EQ(s.down, cfg.ffn_hidden / 2 * cfg.hidden + cfg.hidden);
  EXPECT_EQ(s.q, (cfg.hidden * cfg.q_dim() + cfg.q_dim()) / 2);
}

}  // namespace
}  // namespace herd::model
