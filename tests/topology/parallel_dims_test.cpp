#include "herd/topology/parallel_dims.h"

#include <gtest/gtest.h>

#include <set>

namespace herd::topology {
namespace {

TEST(ParallelDims, RankOrderIsTpCpPpDp) {
  auto p = *ParallelDims::make(2, 3, 4, 5);
  EXPECT_EQ(p.world(), 120);
  // Naive reference: nested loops with DP outermost and TP innermost.
  std::int64_t r = 0;
  for (std::int64_t dp = 0; dp < 5; ++dp)
    for (std::int64_t pp = 0; pp < 4; ++pp)
      for (std::int64_t cp = 0; cp < 3; ++cp)
        for (std::int64_t tp = 0; tp < 2; ++tp, ++r) {
          Coord c{tp, cp, pp, dp};
          EXPECT_EQ(p.rank(c), r);
          EXPECT_EQ(p.coord(r), c);
        }
  EXPECT_EQ(p.stride(Dim::kTP), 1);
  EXPECT_EQ(p.stride(Dim::kCP), 2);
  EXPECT_EQ(p.stride(Dim::kPP), 6);
  EXPECT_EQ(p.stride(Dim::kDP), 24);
}

TEST(ParallelDims, GroupsPartitionTheWorld) {
  auto p = *ParallelDims::make(2, 2, 2, 2);
  for (auto dims : {std::initializer_list<Dim>{Dim::kTP}, {Dim::kCP}, {Dim::kPP}, {Dim::kDP}, {Dim::kDP, Dim::kCP}}) {
    auto gs = p.groups(dims);
    std::set<std::int64_t> all;
    std::int64_t expected = 1;
    for (Dim d : dims) expected *= p.size(d);
    for (const auto& g : gs) {
      EXPECT_EQ(static_cast<std::int64_t>(g.size()), expected);
      for (std::int64_t m : g) EXPECT_TRUE(all.insert(m).second);
    }
    EXPECT_EQ(static_cast<std::int64_t>(all.size()), p.world());
  }
  EXPECT_EQ(p.group(5, Dim::kTP), (std::vector<std::int64_t>{4, 5}));
  EXPECT_EQ(p.group(5, Dim::kCP), (std::vector<std::int64_t>{5, 7}));
  EXPECT_EQ(p.group(5, Dim::kDP), (std::vector<std::int64_t>{5, 13}));
  // Position i of a one-dimensional group holds coordinate i.
  auto g = p.group(9, Dim::kPP);
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(p.coord(g[i]).pp, static_cast<std::int64_t>(i));
}

TEST(ParallelDims, ValidationNamesTheNumbers) {
  EXPECT_EQ(ParallelDims::make(0, 1, 1, 1).error().message(), "tp (0) must be at least 1");
  auto bad = ParallelDims::make(2, 1, 4, 2, 8);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(),
            "tp (2) x cp (1) x pp (4) x dp (2) = 16 ranks, but the job has 8; choose degrees whose product is 8");
  EXPECT_TRUE(ParallelDims::make(2, 1, 2, 2, 8).ok());
}

}  // namespace
}  // namespace herd::topology

namespace herd::topology {
namespace {

TEST(ParallelDims, DescribesItselfWithTheRankCount) {
  EXPECT_EQ(ParallelDims::make(2, 1, 4, 2)->to_string(), "tp2 x cp1 x pp4 x dp2 (16 ranks)");
  EXPECT_EQ(ParallelDims::make(1, 1, 1, 1)->to_string(), "tp1 x cp1 x pp1 x dp1 (1 rank)");
}

}  // namespace
}  // namespace herd::topology
