// Layer assignment tests: Llama 3 405B's split, lighter ends, even splits, contiguity and the errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "herd/schedule/schedule.h"

namespace herd::schedule {
namespace {

std::vector<int> sizes(const LayerAssignment& a) {
  std::vector<int> out;
  for (const auto& l : a.layers) out.push_back(static_cast<int>(l.size()));
  return out;
}

TEST(AssignLayers, Llama405BHasEmptyEnds) {
  // 126 layers, PP 16, V 8: the first stage holds only the embedding, the last only output and loss.
  const LayerAssignment a = *assign_layers(126, 16, 8, true);
  ASSERT_EQ(a.layers.size(), 128u);
  EXPECT_TRUE(a.layers.front().empty());
  EXPECT_TRUE(a.layers.back().empty());
  for (int s = 1; s < 127; ++s) EXPECT_EQ(a.layers[s], std::vector<int>({s - 1}));
}

TEST(AssignLayers, LighterEndsAndEvenSplit) {
  EXPECT_EQ(sizes(*assign_layers(30, 4, 2, true)), std::vector<int>({3, 4, 4, 4, 4, 4, 4, 3}));
  EXPECT_EQ(sizes(*assign_layers(32, 4, 2, false)), std::vector<int>({4, 4, 4, 4, 4, 4, 4, 4}));
  // 32 layers + 2 ends = 34 slots over 8 stages: ends 3, two middle stages 5, spread apart.
  EXPECT_EQ(sizes(*assign_layers(32, 4, 2, true)), std::vector<int>({3, 4, 4, 5, 4, 4, 5, 3}));
  EXPECT_EQ(sizes(*assign_layers(7, 1, 1, true)), std::vector<int>({7}));
  EXPECT_EQ(sizes(*assign_layers(1, 2, 1, true)), std::vector<int>({1, 0}));
}

TEST(AssignLayers, ContiguousCompleteAndEndsLightestOverGrid) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int v = 1; v <= 4; ++v) {
      const int s = pp * v;
      for (int layers = std::max(1, s - 2); layers <= s * 5; ++layers) {
        for (bool lighter : {true, false}) {
          Result<LayerAssignment> a = assign_layers(layers, pp, v, lighter);
          if (!lighter && layers < s) {
            EXPECT_FALSE(a.ok());
            continue;
          }
          ASSERT_TRUE(a.ok()) << a.error().message();
          int next = 0;
          for (const auto& l : a->layers) {
            for (int x : l) EXPECT_EQ(x, next++);
          }
          EXPECT_EQ(next, layers);
          const std::vector<int> z = sizes(*a);
          if (s > 2 && lighter) {
            const int mid_min = *std::min_element(z.begin() + 1, z.end() - 1);
            const int mid_max = *std::max_element(z.begin() + 1, z.end() - 1);
            EXPECT_GE(mid_min, 1);
            EXPECT_LE(mid_max - mid_min, 1);
            // Counting the embedding and the output as one slot each, the ends are never heavier.
            EXPECT_LE(z.front() + 1, mid_max);
            EXPECT_LE(z.back() + 1, mid_max);
            EXPECT_GE(z.back() + 1, mid_min - 1);
          }
          if (!lighter) {
            EXPECT_LE(*std::max_element(z.begin(), z.end()) - *std::min_element(z.begin(), z.end()), 1);
          }
        }
      }
    }
  }
}

TEST(AssignLayers, OneLineErrors) {
  Result<LayerAssignment> a = assign_layers(5, 4, 2, true);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().message(),
            "layers (5) cannot fill pp*v = 4*2 = 8 virtual stages with lighter ends: need at least 6 layers; lower "
            "pp or v or use more layers");
  EXPECT_NE(assign_layers(7, 4, 2, false).error().message().find("layers (7) cannot fill"), std::string::npos);
  EXPECT_NE(assign_layers(32, 4, 0, true).error().message().find("v (0)"), std::string::npos);
  EXPECT_NE(assign_layers(0, 4, 2, true).error().message().find("layers (0)"), std::string::npos);
}

}  // namespace
}  // namespace herd::schedule
