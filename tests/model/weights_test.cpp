// The weight table against the parameter counts of model/params.h (computed separately, per
// component), and the TP blocks tiling every weight exactly once.
#include "herd/model/weights.h"

#include <gtest/gtest.h>

#include <vector>

#include "herd/model/params.h"

namespace herd::model {
namespace {

TEST(Weights, TableCountsMatchTheParameterCounts) {
  for (const char* name : {"llama3-8b", "tiny"}) {
    const LlamaConfig cfg = *preset(name);
    for (std::int64_t tp : {1, 2, 4}) {
      const std::vector<Weight> table = llama_weights(cfg, tp);
      ASSERT_EQ(table.size(), static_cast<std::size_t>(9 * cfg.n_layers + 3)) << name;
      const ModelParams full = model_params(cfg), shard = model_params_tp_shard(cfg, tp);
      std::int64_t total = 0, local = 0, offset = 0;
      for (const Weight& w : table) {
        EXPECT_EQ(w.offset, offset) << w.name;  // contiguous, in table order
        offset += w.count();
        total += w.count();
        local += w.local_count();
      }
      EXPECT_EQ(total, full.total() + (cfg.tie_embeddings ? cfg.vocab * cfg.hidden : 0)) << name;
      EXPECT_EQ(local, shard.layer.total() * cfg.n_layers + shard.embedding + shard.final_norm +
                           (cfg.tie_embeddings ? shard.embedding : shard.output))
          << name << " tp" << tp;
      const std::vector<WeightUnit> units = llama_weight_units(table);
      ASSERT_EQ(units.size(), static_cast<std::size_t>(cfg.n_layers + 2));
      EXPECT_EQ(units[1].name, "layers.0");
      EXPECT_EQ(units[1].local_count, shard.layer.total());
    }
  }
}

TEST(Weights, TpBlocksTileEachWeightOnce) {
  const LlamaConfig cfg = *preset("tiny");
  const std::int64_t tp = 2;
  for (const Weight& w : llama_weights(cfg, tp)) {
    std::vector<int> hits(static_cast<std::size_t>(w.count()), 0);
    const int ranks = w.split == TpSplit::kReplicated ? 1 : static_cast<int>(tp);
    for (int r = 0; r < ranks; ++r) {
      const TpBlock b = tp_block(w, tp, r);
      EXPECT_EQ(b.rows(), w.local_rows) << w.name;
      EXPECT_EQ(b.cols(), w.local_cols) << w.name;
      for (std::int64_t i = b.r0; i < b.r1; ++i) {
        for (std::int64_t j = b.c0; j < b.c1; ++j) ++hits[static_cast<std::size_t>(i * w.cols + j)];
      }
    }
    for (int h : hits) ASSERT_EQ(h, 1) << w.name;
  }
  const std::vector<Weight> t = llama_weights(cfg, tp);
  EXPECT_EQ(t[1].name, "layers.0.attn_norm");
  EXPECT_EQ(t[5].name, "layers.0.wo");
  EXPECT_EQ(t[5].split, TpSplit::kCols);
  EXPECT_EQ(tp_block(t[5], 2, 1).c0, cfg.q_dim() / 2);
  EXPECT_EQ(t[5].init, WeightInit::kResidual);
}

}  // namespace
}  // namespace herd::model
