// Attention work per CP rank: how many (query, key) pairs each rank's queries must score.
//
// Under a causal mask the last tokens of a sequence see the most keys, so a contiguous split (rank r
// holds tokens [r T/cp, (r+1) T/cp)) gives the last rank about 2cp - 1 times the first rank's work.
// The Llama 3 split pairs chunk r with chunk 2cp - 1 - r, which makes the causal count identical on
// every rank. This header counts the pairs exactly for both splits and any mask given by positions and
// document ids, for the load-balance benchmark (bench/cp) and its table in docs/cp.md.
#pragma once

#include <cstdint>
#include <vector>

namespace herd::parallel::cp {

enum class SplitKind {
  kLoadBalanced,  // Llama 3: chunks r and 2cp-1-r of 2cp
  kContiguous,    // chunk r of cp
};
const char* split_name(SplitKind k);  // "load_balanced", "contiguous"

// The sequence indices of rank's queries, in local order. Requires seq_len divisible by 2 x cp.
std::vector<std::int64_t> rank_token_indices(SplitKind kind, std::int64_t seq_len, std::int64_t cp, std::int64_t rank);

// Pairs (i, j) with i among rank's queries, j any token of the sequence, doc[j] == doc[i] and
// pos[j] <= pos[i] (the kernels' mask). pos and doc are (seq_len) for one sequence; doc null: one document.
std::int64_t visible_pairs(SplitKind kind, std::int64_t seq_len, std::int64_t cp, std::int64_t rank,
                           const std::int32_t* pos, const std::int32_t* doc);

}  // namespace herd::parallel::cp
