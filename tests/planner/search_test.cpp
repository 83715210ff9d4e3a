// The family search that `herd plan` and `herd estimate` share: its step-time bounds skip work but
// change no answer (the same rows and rejections as costing everything), its choice within a family
// is held against simulating every variant, given knobs stay fixed, each knob's reason names a
// simulated runner-up, and a family where nothing fits says what would. plan_up_to ranks every count
// up to its limit, its bounds again changing no answer.
#include "herd/planner/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

namespace herd::planner {
namespace {

Layout degrees(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp) {
  Layout l;
  l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp;
  return l;
}

const KnobChoice& knob(const FamilyChoice& c, const std::string& name) {
  for (const KnobChoice& k : c.knobs) {
    if (k.knob == name) return k;
  }
  HERD_CHECK(false, "no knob ", name);
  return c.knobs.front();
}

// Runs a search with its bounds and costing everything: the same rows, in the same order, and the
// bounds skip work. Returns {pruned, full}.
template <class Search>
std::pair<PlanResult, PlanResult> pruned_and_full(Search search, std::size_t rows) {
  SearchSpace pruned, full;
  full.prune = false;
  Result<PlanResult> a = search(pruned);
  Result<PlanResult> b = search(full);
  HERD_CHECK(a.ok() && b.ok(), "search failed");
  EXPECT_EQ(a->ranked.size(), rows);
  EXPECT_EQ(a->ranked.size(), b->ranked.size());
  for (std::size_t i = 0; i < std::min(a->ranked.size(), b->ranked.size()); ++i) {
    EXPECT_EQ(a->ranked[i].layout.to_string(), b->ranked[i].layout.to_string()) << i;
    EXPECT_EQ(a->ranked[i].gpus, b->ranked[i].gpus) << i;
    EXPECT_EQ(a->ranked[i].time.step_s, b->ranked[i].time.step_s) << i;
  }
  EXPECT_EQ(b->layouts_pruned, 0);
  EXPECT_LT(a->layouts_costed, b->layouts_costed);
  return {std::move(*a), std::move(*b)};
}

// A mid-size case: Llama 3 70B over 1,024 H100s (many families, some out of memory, some ranked).
TEST(Search, PrunedSearchRanksAndRejectsExactlyAsTheFullOne) {
  const auto cfg = *model::preset("llama3-70b");
  const auto cluster = *topology::cluster_preset("dgx-h100");
  const TrainingSpec t{8192, 512, Precision::kBF16};
  const auto [a, b] = pruned_and_full([&](const SearchSpace& s) { return plan(cfg, cluster, t, 1024, s, 8); }, 8);
  ASSERT_EQ(a.rejected.size(), b.rejected.size());
  bool out_of_memory = false;
  for (std::size_t i = 0; i < a.rejected.size(); ++i) {
    EXPECT_EQ(a.rejected[i].reason, b.rejected[i].reason) << i;
    EXPECT_EQ(a.rejected[i].tp * 1000000 + a.rejected[i].pp, b.rejected[i].tp * 1000000 + b.rejected[i].pp);
    out_of_memory = out_of_memory || a.rejected[i].reason.rfind("out of memory", 0) == 0;
  }
  EXPECT_TRUE(out_of_memory);  // the case exercises the rejected families' leanest-variant search
  EXPECT_GT(a.layouts_pruned, 0);
}

// Up to 60 accelerators (a job of 64 that lost a node of 4): every count at once. 60 = 4 x 15 leaves
// Llama 3 8B with 128 sequences only pipelines of 15 or 30 stages, so the best is on fewer.
TEST(Search, PlanUpToRanksEveryCountAsTheFullSearchDoes) {
  const auto cfg = *model::preset("llama3-8b");
  const auto cluster = *topology::cluster_preset("dgx-h100");
  const TrainingSpec t{8192, 128, Precision::kBF16};
  const auto [a, b] = pruned_and_full([&](const SearchSpace& s) { return plan_up_to(cfg, cluster, t, 60, s, 4); }, 4);
  for (std::size_t i = 0; i < a.ranked.size(); ++i) {
    EXPECT_LE(a.ranked[i].gpus, 60) << i;
    EXPECT_EQ(a.ranked[i].layout.gpus(), a.ranked[i].gpus) << i;
    EXPECT_TRUE(a.ranked[i].fits()) << i;
    if (i > 0) {
      EXPECT_LE(a.ranked[i - 1].time.step_s, a.ranked[i].time.step_s);
    }
  }
  EXPECT_EQ(a.families, b.families);
  EXPECT_TRUE(a.rejected.empty());
  ASSERT_FALSE(a.ranked.empty());
  EXPECT_LT(a.ranked.front().gpus, 60);
  // No count is left out: the best of exactly 32 accelerators (plan's own) is no faster.
  Result<PlanResult> at32 = plan(cfg, cluster, t, 32, SearchSpace{}, 1);
  ASSERT_TRUE(at32.ok() && !at32->ranked.empty());
  EXPECT_LE(a.ranked.front().time.step_s, at32->ranked.front().time.step_s);
  EXPECT_FALSE(plan_up_to(cfg, cluster, t, 0, SearchSpace{}, 1).ok());
  EXPECT_FALSE(plan_up_to(cfg, cluster, t, 1 << 20, SearchSpace{}, 1).ok());
}

// Within one family the choice is held against the simulator over every variant: the quick pass
// only orders what is simulated, so the choice must be (near) the true best.
TEST(Search, FamilyChoiceIsTheBestOfEveryVariantSimulated) {
  const auto cfg = *model::preset("llama3-8b");
  const auto cluster = *topology::cluster_preset("dgx-h100");
  const TrainingSpec t{8192, 128, Precision::kBF16};
  const Layout d = degrees(2, 1, 4, 8);
  Result<FamilyChoice> c = choose_layout(cfg, cluster, t, d, 64, SearchSpace{});
  ASSERT_TRUE(c.ok()) << c.error().message();
  ASSERT_TRUE(c->best.fits());
  double truth = std::numeric_limits<double>::infinity();
  int simulated = 0;
  for (std::int64_t mb : {1, 2, 4, 8, 16}) {
    for (model::Recompute rc : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
      for (bool sp : {true, false}) {
        for (int v : {1, 2, 4, 8}) {
          const int m = static_cast<int>(t.global_batch / (d.dp * mb));
          for (int n : {std::min(4, m), m}) {
            Layout l = d;
            l.microbatch = mb, l.recompute = rc, l.sequence_parallel = sp, l.v = v, l.n = n;
            Result<Estimate> e = estimate(cfg, cluster, t, l, 64);
            if (!e.ok()) continue;
            ++simulated;
            if (e->fits()) truth = std::min(truth, e->time.step_s);
          }
        }
      }
    }
  }
  EXPECT_GT(simulated, 200);
  EXPECT_LE(c->best.time.step_s, truth * 1.01) << c->best.layout.to_string();
  EXPECT_GE(c->best.time.step_s, truth * (1 - 1e-9));
}

TEST(Search, PlanRowsAreWhatEstimateChoosesForTheirDegrees) {
  const auto cfg = *model::preset("llama3-8b");
  const auto cluster = *topology::cluster_preset("dgx-h100");
  const TrainingSpec t{8192, 256, Precision::kBF16};
  Result<PlanResult> p = plan(cfg, cluster, t, 64, SearchSpace{}, 3);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->ranked.size(), 3u);
  for (const Estimate& row : p->ranked) {
    const Layout& l = row.layout;
    Result<FamilyChoice> c = choose_layout(cfg, cluster, t, degrees(l.tp, l.cp, l.pp, l.dp), 64, SearchSpace{});
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(c->best.fits());
    // estimate also simulates each knob's runner-up, so it can only do better than the plan's row.
    EXPECT_LE(c->best.time.step_s, row.time.step_s * (1 + 1e-9)) << l.to_string();
  }
}

TEST(Search, GivenKnobsAreFixedAndTheRestExplained) {
  const auto cfg = *model::preset("llama3-70b");
  const auto cluster = *topology::cluster_preset("dgx-h100");
  const TrainingSpec t{8192, 512, Precision::kBF16};
  SearchSpace s;
  s.v = 2;
  s.recompute = model::Recompute::kFull;
  Result<FamilyChoice> c = choose_layout(cfg, cluster, t, degrees(8, 1, 4, 16), 512, s);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->best.layout.v, 2);
  EXPECT_EQ(c->best.layout.recompute, model::Recompute::kFull);
  EXPECT_TRUE(knob(*c, "v").given);
  EXPECT_EQ(knob(*c, "v").value, "2");
  EXPECT_EQ(knob(*c, "recompute").value, "full");
  EXPECT_TRUE(knob(*c, "recompute").given);
  for (const char* name : {"microbatch_size", "n", "sequence_parallel"}) {
    const KnobChoice& k = knob(*c, name);
    EXPECT_FALSE(k.given) << name;
    ASSERT_TRUE(k.runner_up) << name;
    EXPECT_NE(k.runner_up->value, k.value) << name;
    EXPECT_NE(k.why.find(k.flag), std::string::npos) << k.why;
    // A runner-up that fits is never faster than the choice (else it would have been chosen).
    if (k.runner_up->fits) {
      EXPECT_GE(k.runner_up->step_s, c->best.time.step_s) << name;
    }
  }
  // The variants all have V = 2 and full recompute; the counts add up.
  EXPECT_GT(c->variants, 0);
  EXPECT_LE(c->fitting, c->variants);
  EXPECT_GT(c->simulated, 0);
}

// A knob whose other values cannot fit says so, with what the leanest of them needs (simulated); one
// whose runner-up fits names the values with which nothing does.
TEST(Search, FitsOnlyWithAndNothingFitsWith) {
  const auto cfg = *model::preset("llama3-405b");
  const auto cluster = *topology::cluster_preset("llama3-h100");
  const TrainingSpec t{8192, 2048, Precision::kBF16};
  Result<FamilyChoice> c = choose_layout(cfg, cluster, t, degrees(2, 1, 32, 256), 16384, SearchSpace{});
  ASSERT_TRUE(c.ok()) << c.error().message();
  ASSERT_TRUE(c->best.fits());
  const KnobChoice& rc = knob(*c, "recompute");
  EXPECT_EQ(rc.value, "full");
  EXPECT_EQ(rc.why.rfind("fits only with --recompute full: the leanest with another value", 0), 0u) << rc.why;
  ASSERT_TRUE(rc.runner_up);
  EXPECT_FALSE(rc.runner_up->fits);
  EXPECT_GT(rc.runner_up->memory_bytes, c->best.memory.capacity_bytes);

  SearchSpace v2;
  v2.v = 2;
  c = choose_layout(cfg, cluster, t, degrees(8, 1, 16, 128), 16384, v2);
  ASSERT_TRUE(c.ok()) << c.error().message();
  const KnobChoice& r2 = knob(*c, "recompute");
  EXPECT_EQ(r2.value, "selective");
  EXPECT_NE(r2.why.find("nothing fits with --recompute none"), std::string::npos) << r2.why;
  ASSERT_TRUE(r2.runner_up);
  EXPECT_TRUE(r2.runner_up->fits);
  EXPECT_EQ(r2.runner_up->value, "full");
}

TEST(Search, NothingFitsSaysWhatWould) {
  const auto cfg = *model::preset("llama3-405b");
  const auto cluster = *topology::cluster_preset("llama3-h100");
  const TrainingSpec t{8192, 64, Precision::kBF16};
  Result<FamilyChoice> c = choose_layout(cfg, cluster, t, degrees(8, 1, 2, 4), 64, SearchSpace{});
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_FALSE(c->best.fits());
  EXPECT_GT(c->best.memory.total_bytes, c->best.memory.capacity_bytes);
  EXPECT_NE(c->to_fit.find("needs"), std::string::npos) << c->to_fit;
  EXPECT_NE(c->to_fit.find("accelerators with at least"), std::string::npos) << c->to_fit;
  // The leanest variant recomputes everything.
  EXPECT_EQ(c->best.layout.recompute, model::Recompute::kFull);
  for (const KnobChoice& k : c->knobs) EXPECT_NE(k.why.find("nothing fits"), std::string::npos) << k.knob;

  // Meta's degrees with V = 1 and nothing recomputed given: freeing the knobs fits, and so do other
  // degrees of the same GPUs with those knobs.
  SearchSpace fixed;
  fixed.v = 1;
  fixed.recompute = model::Recompute::kNone;
  const TrainingSpec t4{8192, 2048, Precision::kBF16};
  c = choose_layout(cfg, cluster, t4, degrees(8, 1, 16, 128), 16384, fixed);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_FALSE(c->best.fits());
  EXPECT_NE(c->to_fit.find("it fits with the knobs left to the search: --tp 8 --cp 1 --pp 16 --dp 128"),
            std::string::npos)
      << c->to_fit;
  EXPECT_NE(c->to_fit.find("herd plan's best"), std::string::npos) << c->to_fit;
}

TEST(Search, ImpossibleDegreesGiveTheConstraint) {
  const auto cfg = *model::preset("llama3-405b");
  const auto cluster = *topology::cluster_preset("llama3-h100");
  const TrainingSpec t{8192, 2048, Precision::kBF16};
  Result<FamilyChoice> c = choose_layout(cfg, cluster, t, degrees(16, 1, 8, 128), 16384, SearchSpace{});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("num_key_value_heads (8) is not divisible by tp (16)"), std::string::npos);
  SearchSpace n;
  n.n = 64;  // M is 16 with one sequence per micro-batch
  n.microbatch = 1;
  c = choose_layout(cfg, cluster, t, degrees(8, 1, 16, 128), 16384, n);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("n (64) must be in [1, M = 16]"), std::string::npos) << c.error().message();
}

}  // namespace
}  // namespace herd::planner
