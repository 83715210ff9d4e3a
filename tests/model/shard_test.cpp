// The shard rules: one line per rule naming the field, its value, the degree and the fix.
#include "herd/model/shard.h"

#include <gtest/gtest.h>

namespace herd::model {
namespace {

TEST(ShardRules, OneLinePerRuleNamingFieldValueAndFix) {
  LlamaConfig cfg = *preset("tiny");
  cfg.n_heads = 6;
  cfg.n_kv_heads = 6;
  EXPECT_EQ(check_shardable(cfg, {.tp = 4}).error().message(),
            "num_attention_heads (6) is not divisible by tp (4); choose a tp that divides 6");
  cfg = *preset("tiny");
  cfg.vocab = 30;
  EXPECT_EQ(check_shardable(cfg, {.tp = 4}).error().message(),
            "vocab_size (30) is not divisible by tp (4); choose a tp that divides 30");
  EXPECT_TRUE(check_shardable(cfg, {.tp = 2, .vocab_padded = true}).ok());
  EXPECT_EQ(check_shardable(cfg, {.tp = 1, .cp = 2, .seq_len = 6}).error().message(),
            "seq_len (6) is not divisible by 2 x cp (4): context parallelism cuts each sequence into 2 x cp chunks; "
            "use a multiple of 4");
  EXPECT_EQ(check_shardable(cfg, {.tp = 4, .cp = 2, .seq_len = 20, .sequence_parallel = true, .vocab_padded = true})
                .error()
                .message(),
            "seq_len / cp (20 / 2 = 10) is not divisible by tp (4), as sequence parallelism needs; use a seq_len "
            "that is a multiple of 16 or turn sequence parallelism off");
  EXPECT_TRUE(check_shardable(cfg, {.tp = 4, .cp = 2, .seq_len = 20, .vocab_padded = true}).ok());
}

}  // namespace
}  // namespace herd::model
