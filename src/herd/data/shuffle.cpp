// The held-out split: a deterministic choice of documents from the seed.
#include "herd/data/shuffle.h"

#include <cmath>

namespace herd::data {

std::vector<bool> heldout_mask(std::int64_t n_docs, double fraction, std::uint64_t seed) {
  std::vector<bool> held(static_cast<std::size_t>(n_docs), false);
  if (fraction <= 0 || n_docs <= 0) return held;
  auto k = static_cast<std::int64_t>(std::llround(fraction * static_cast<double>(n_docs)));
  if (k == 0 && n_docs >= 2) k = 1;
  const std::vector<std::int64_t> p = permutation(n_docs, derive_seed(seed, /*stream=*/1, 0));
  for (std::int64_t i = 0; i < k && i < n_docs; ++i) held[static_cast<std::size_t>(p[i])] = true;
  return held;
}

}  // namespace herd::data
