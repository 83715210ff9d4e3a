// Exact per-rank attention pair counts for the CP load-balance comparison (see cp_balance.h).
#include "herd/parallel/cp/cp_balance.h"

#include <iterator>
#include <map>

#include "herd/core/check.h"
#include "herd/parallel/cp/cp_attention.h"

namespace herd::parallel::cp {

const char* split_name(SplitKind k) { return k == SplitKind::kLoadBalanced ? "load_balanced" : "contiguous"; }

std::vector<std::int64_t> rank_token_indices(SplitKind kind, std::int64_t seq_len, std::int64_t cp, std::int64_t rank) {
  HERD_CHECK(cp >= 1 && rank >= 0 && rank < cp && seq_len % (2 * cp) == 0);
  std::vector<std::int64_t> idx;
  if (kind == SplitKind::kContiguous) {
    const std::int64_t n = seq_len / cp;
    for (std::int64_t t = 0; t < n; ++t) idx.push_back(rank * n + t);
  } else {
    const CpSplit s{seq_len, cp, rank};
    for (std::int64_t t = 0; t < s.local_len(); ++t) idx.push_back(s.global_index(t));
  }
  return idx;
}

std::int64_t visible_pairs(SplitKind kind, std::int64_t seq_len, std::int64_t cp, std::int64_t rank,
                           const std::int32_t* pos, const std::int32_t* doc) {
  // Keys visible to query i: same document, position <= pos[i]. Count per document a histogram of
  // positions, then prefix sums, so the count is O(T log T) rather than O(T^2).
  std::map<std::int32_t, std::map<std::int32_t, std::int64_t>> per_doc;  // doc -> position -> count
  for (std::int64_t j = 0; j < seq_len; ++j) ++per_doc[doc ? doc[j] : 0][pos[j]];
  std::map<std::int32_t, std::map<std::int32_t, std::int64_t>> at_most;  // doc -> position -> keys <= it
  for (const auto& [d, hist] : per_doc) {
    std::int64_t run = 0;
    for (const auto& [p, n] : hist) at_most[d][p] = run += n;
  }
  std::int64_t pairs = 0;
  for (const std::int64_t i : rank_token_indices(kind, seq_len, cp, rank)) {
    const auto& cum = at_most[doc ? doc[i] : 0];
    pairs += cum.upper_bound(pos[i]) == cum.begin() ? 0 : std::prev(cum.upper_bound(pos[i]))->second;
  }
  return pairs;
}

}  // namespace herd::parallel::cp
