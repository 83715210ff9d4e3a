// AlignedVector: every buffer starts on a cache line, whatever its size and however it grows (the
// property that makes a kernel rate measured on it the rate the arena's tensors get).
#include "herd/core/aligned.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace herd {
namespace {

bool on_a_cache_line(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kAlignment == 0; }

TEST(AlignedVector, EveryBufferStartsOnACacheLine) {
  // Small sizes come from malloc's bins, large ones (>= 128 KiB) from mmap, where glibc's pointers sit
  // 16 bytes past a page boundary: both must be aligned here.
  for (std::size_t n :
       {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{1} << 16, std::size_t{1} << 22}) {
    AlignedVector<float> f(n, 1.0f);
    AlignedVector<std::uint16_t> h(n + 1);
    EXPECT_TRUE(on_a_cache_line(f.data())) << n;
    EXPECT_TRUE(on_a_cache_line(h.data())) << n;
    EXPECT_EQ(f.size(), n);
    EXPECT_EQ(f[n - 1], 1.0f);
  }
  AlignedVector<double> grown;
  for (int i = 0; i < 100000; ++i) {
    grown.push_back(i);
    ASSERT_TRUE(on_a_cache_line(grown.data())) << i;
  }
  EXPECT_EQ(grown[99999], 99999.0);
  const AlignedVector<double> copy = grown;
  EXPECT_TRUE(on_a_cache_line(copy.data()));
  EXPECT_EQ(copy, grown);
}

}  // namespace
}  // namespace herd
