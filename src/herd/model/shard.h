// The shard rules: what a layout must satisfy to cut this model's shapes, checked once, here, beside
// the shapes they cut (STYLE habit 17). Every layer that divides calls these functions (the planner,
// the activation shapes, the runtime's layer sizes and layout check, the CP split), so each rule has
// one wording: "<field> (<value>) is not divisible by <degree>
// (<value>); <fix>".
//
// The degrees themselves (each >= 1, their product equal to the world size) are the mesh's rules and
// live in topology::ParallelDims; these functions expect degrees >= 1.
#pragma once

#include <cstdint>

#include "herd/core/error.h"
#include "herd/model/config.h"

namespace herd::model {

struct ShardSpec {
  std::int64_t tp = 1;
  std::int64_t cp = 1;
  std::int64_t seq_len = 0;  // T, the full sequence; 0: skip the sequence rules
  bool sequence_parallel = false;
  // The runtime needs tp to divide the vocabulary (the embedding and the head are split by whole rows);
  // the planner models padding to ceil(vocab / tp) rows instead and sets this.
  bool vocab_padded = false;
};

// Each rule on its own, for the callers that cut only one dimension.
Status check_tp_divides(const char* field, std::int64_t value, std::int64_t tp);      // heads, kv heads, ffn, vocab
Status check_cp_divides_seq(std::int64_t seq_len, std::int64_t cp);                   // 2 x cp divides seq_len
Status check_sp_divides_seq(std::int64_t seq_len, std::int64_t cp, std::int64_t tp);  // tp divides seq_len / cp

// Every rule, in this order: tp divides num_attention_heads, num_key_value_heads, intermediate_size
// and (unless vocab_padded) vocab_size; 2 x cp divides seq_len; under sequence parallelism with tp > 1,
// tp divides the CP-local sequence seq_len / cp. The first broken rule is the error.
Status check_shardable(const LlamaConfig& cfg, const ShardSpec& s);

}  // namespace herd::model
