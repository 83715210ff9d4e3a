// Per-rank attention work: exact pair counts against closed forms for the causal mask, and a brute
// force count for packed documents.
#include "herd/parallel/cp/cp_balance.h"

#include <gtest/gtest.h>

#include <vector>

namespace herd::parallel::cp {
namespace {

TEST(CpBalance, CausalPairsAreEqualAcrossRanksUnderTheLlama3Split) {
  // Chunk j of c tokens scores j c^2 + c (c + 1) / 2 pairs; rank r holds chunks r and 2cp-1-r, so
  // every rank scores (2cp - 1) c^2 + c (c + 1). A contiguous split gives rank r chunks 2r and 2r+1.
  for (const std::int64_t cp : {1, 2, 4, 8}) {
    const std::int64_t T = 2 * cp * 12, c = 12;
    std::vector<std::int32_t> pos(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) pos[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t);
    for (std::int64_t r = 0; r < cp; ++r) {
      EXPECT_EQ(visible_pairs(SplitKind::kLoadBalanced, T, cp, r, pos.data(), nullptr),
                (2 * cp - 1) * c * c + c * (c + 1));
      EXPECT_EQ(visible_pairs(SplitKind::kContiguous, T, cp, r, pos.data(), nullptr),
                (4 * r + 1) * c * c + c * (c + 1));
    }
  }
}

TEST(CpBalance, DocumentPairsMatchABruteForceCount) {
  const std::int64_t T = 48, cp = 4;
  std::vector<std::int32_t> pos(T), doc(T);
  const std::vector<std::int64_t> starts = {0, 5, 19, 20, 33};
  for (std::int64_t t = 0, d = 0; t < T; ++t) {
    while (d + 1 < static_cast<std::int64_t>(starts.size()) && t >= starts[static_cast<std::size_t>(d + 1)]) ++d;
    pos[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t - starts[static_cast<std::size_t>(d)]);
    doc[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(d);
  }
  std::int64_t total = 0;
  for (const SplitKind kind : {SplitKind::kLoadBalanced, SplitKind::kContiguous}) {
    std::int64_t sum = 0;
    for (std::int64_t r = 0; r < cp; ++r) {
      std::int64_t brute = 0;
      for (const std::int64_t i : rank_token_indices(kind, T, cp, r))
        for (std::int64_t j = 0; j < T; ++j) brute += doc[j] == doc[i] && pos[j] <= pos[i];
      EXPECT_EQ(visible_pairs(kind, T, cp, r, pos.data(), doc.data()), brute) << split_name(kind) << " rank " << r;
      sum += brute;
    }
    if (total == 0) total = sum;
    EXPECT_EQ(sum, total);  // both splits cover every query once
  }
}

}  // namespace
}  // namespace herd::parallel::cp
