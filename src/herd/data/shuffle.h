// Seeded permutations that are the same on every platform and compiler (std::shuffle and the
// std distributions are implementation-defined): SplitMix64 and a Fisher-Yates shuffle over it.
// Used for the held-out split and for each epoch's document order.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace herd::data {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) without modulo bias (rejection sampling).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
      const std::uint64_t x = next();
      if (x < limit) return x % n;
    }
  }

 private:
  std::uint64_t state_;
};

// A seeded random permutation of 0..n-1.
inline std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[i] = i;
  SplitMix64 rng(seed);
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

// Derives independent seeds for independent uses (split, epoch e) from one user seed.
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  SplitMix64 a(seed ^ (stream * 0xD1B54A32D192ED03ULL));
  SplitMix64 b(a.next() ^ (index * 0x9E3779B97F4A7C15ULL));
  return b.next();
}

// Which documents are held out: round(fraction x n) of them (at least one when fraction > 0 and
// n >= 2), chosen by a seeded permutation; true = held out.
std::vector<bool> heldout_mask(std::int64_t n_docs, double fraction, std::uint64_t seed);

}  // namespace herd::data
