// The shard rules: what a layout must satisfy to cut this model's shapes, checked once, here, beside
// the shapes they cut. Every layer that divides calls these functions (the planner,
// the activation shapes, the runtime's layer sizes and layout check, and the CP split below, which the
// data loader and CP attention share), so each rule has one wording: "<field> (<value>) is not divisible by <degree>
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
Status check_tp_divides(const char* field, std::int64_t value, std::int64_t tp);  // heads, kv heads, ffn, vocab
Status check_cp_divides_seq(std::int64_t seq_len, std::int64_t cp);               // 2 x cp divides seq_len

// The batch rule: dp x the micro-batch size divides the global batch (sequences per step), so every
// data-parallel rank gets a whole number of micro-batches (microbatch 1: of sequences). The names are
// the fields as the caller's input spells them ("train.global_batch", "parallel.dp", ...).
struct BatchFieldNames {
  const char* global_batch = "global batch";
  const char* dp = "dp";
  const char* microbatch = "microbatch size";
};
Status check_dp_divides_batch(std::int64_t global_batch, std::int64_t dp, std::int64_t microbatch = 1,
                              const BatchFieldNames& names = {});
Status check_sp_divides_seq(std::int64_t seq_len, std::int64_t cp, std::int64_t tp);  // tp divides seq_len / cp

// Every rule, in this order: tp divides num_attention_heads, num_key_value_heads, intermediate_size
// and (unless vocab_padded) vocab_size; 2 x cp divides seq_len; under sequence parallelism with tp > 1,
// tp divides the CP-local sequence seq_len / cp. The first broken rule is the error.
Status check_shardable(const LlamaConfig& cfg, const ShardSpec& s);

// The load-balanced context-parallel split of a sequence of seq_len tokens over cp ranks (Llama 3):
// the sequence is cut into 2 x cp chunks of c = seq_len / (2 cp) tokens and rank r holds chunks r and
// 2 cp - 1 - r, in that order, so every rank has the same causal attention work (docs/cp.md). The one
// statement of this index math: the data loader slices batches with it (data::slice_batch) and CP
// attention places keys and masks with it (parallel/cp).
struct CpSplit {
  std::int64_t seq_len = 0;
  std::int64_t cp = 1;
  std::int64_t rank = 0;

  std::int64_t chunk() const { return seq_len / (2 * cp); }  // c
  std::int64_t local_len() const { return 2 * chunk(); }     // 2c
  // The sequence chunk held in local slot 0 or 1: rank, then 2 cp - 1 - rank.
  std::int64_t chunk_of(int slot) const { return slot == 0 ? rank : 2 * cp - 1 - rank; }
  // The sequence index of local token t, 0 <= t < 2c.
  std::int64_t global_index(std::int64_t t) const { return chunk_of(t < chunk() ? 0 : 1) * chunk() + t % chunk(); }
};

// Errors: cp below 1 or rank outside it, check_cp_divides_seq's.
Result<CpSplit> make_cp_split(std::int64_t seq_len, std::int64_t cp, std::int64_t rank);

}  // namespace herd::model
