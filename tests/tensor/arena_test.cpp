// Arena marks, resets, peaks and per-tag accounting; overflow names the tag.
#include "herd/tensor/arena.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace herd::tensor {
namespace {

TEST(Arena, MarkResetPeakAndTags) {
  Arena a(1 << 20);
  void* p0 = a.allocate(100, "x");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p0) % 64, 0u);
  EXPECT_EQ(a.used(), 128u);  // rounded to 64 bytes
  const Arena::Mark m = a.mark();
  float* t = a.allocate_array<float>(256, "scratch");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t) % 64, 0u);
  a.allocate(64, "scratch");
  EXPECT_EQ(a.used(), 128u + 1024u + 64u);
  a.reset(m);
  EXPECT_EQ(a.used(), 128u);
  EXPECT_EQ(a.peak(), 128u + 1024u + 64u);
  EXPECT_EQ(a.tag_peak("scratch"), 1088u);
  EXPECT_EQ(a.tags().at("scratch").current, 0u);
  void* p1 = a.allocate(8, "y");  // memory after the mark is reused
  EXPECT_EQ(static_cast<char*>(p1), static_cast<char*>(p0) + 128);
  a.reset();
  a.reset_peak();
  EXPECT_EQ(a.peak(), 0u);
  EXPECT_EQ(a.tag_peak("x"), 0u);
}

TEST(ArenaDeathTest, OverflowNamesTheTag) {
  Arena a(256);
  EXPECT_DEATH(a.allocate(1000, "layer0.mlp"), "arena full: 'layer0.mlp' asks 1000 bytes");
}

}  // namespace
}  // namespace herd::tensor
