// The step-time band (planner/band.h) in cases worked by hand: every source off gives p10 = p90 =
// the point; one source alone gives its documented quantiles; the sources of a real estimate are
// what docs/planner.md (Step-time band) says they are.
#include "herd/planner/band.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace herd::planner {
namespace {

// The stratified sample puts each quantile within about 1e-4 of the exact one (strata of 1 / 10,000).
constexpr double kTol = 2e-4;

TEST(StepBand, EverySourceOffGivesThePoint) {
  const StepBand b = step_band(12.3, BandSources{});
  EXPECT_EQ(b.point_s, 12.3);
  EXPECT_EQ(b.p10_s, 12.3);
  EXPECT_EQ(b.p90_s, 12.3);
}

TEST(StepBand, SoftwareAloneSpansTheFastestAndSlowestPreset) {
  BandSources s;
  s.software_ratios = {1.0, 1.3, 1.1, 0.96};  // each preset a quarter of the draws: p10, p90 the extremes
  const StepBand b = step_band(10.0, s);
  EXPECT_DOUBLE_EQ(b.p10_s, 9.6);
  EXPECT_DOUBLE_EQ(b.p90_s, 13.0);
}

TEST(StepBand, CommunicationAloneScalesTheExposedShare) {
  BandSources s;
  s.comm_share = 0.5;
  s.comm_sigma = kCommBandwidthSigma;
  const StepBand b = step_band(2.0, s);
  // p10 = 2 x (0.5 + 0.5 exp(-1.2816 x 0.09631)) = 2 x 0.9419; p90 = 2 x (0.5 + 0.5 x 1.1314).
  EXPECT_NEAR(b.p10_s, 2.0 * (0.5 + 0.5 * std::exp(-kZ90 * kCommBandwidthSigma)), kTol * 2);
  EXPECT_NEAR(b.p90_s, 2.0 * (0.5 + 0.5 * std::exp(kZ90 * kCommBandwidthSigma)), kTol * 2);
  EXPECT_NEAR(b.p10_s, 1.8838, 1e-3);
  EXPECT_NEAR(b.p90_s, 2.1314, 1e-3);
  // The bus bandwidth range documented: p90 / p10 of the communication time = 0.96 / 0.75.
  EXPECT_NEAR(std::exp(2 * kZ90 * kCommBandwidthSigma), kBusBandwidthHigh / kBusBandwidthLow, 1e-4);
}

TEST(StepBand, ScaleSigmaGrowsAsTheSquareRootOfLnG) {
  EXPECT_EQ(scale_sigma(1), 0.0);
  EXPECT_NEAR(scale_sigma(65536), 0.09, 1e-12);
  EXPECT_NEAR(scale_sigma(256), 0.09 * std::sqrt(0.5), 1e-12);  // ln 256 / ln 65,536 = 8 / 16
  EXPECT_NEAR(scale_sigma(16), 0.045, 1e-12);                   // 4 / 16
  BandSources s;
  s.scale_sigma = scale_sigma(65536);
  const StepBand b = step_band(1.0, s);
  EXPECT_NEAR(b.p10_s, std::exp(-kZ90 * 0.09), kTol);  // 0.8910
  EXPECT_NEAR(b.p90_s, std::exp(kZ90 * 0.09), kTol);   // 1.1223
}

TEST(StepBand, ResidualAloneGivesItsPercentilesAnAsymmetricBand) {
  BandSources s;
  s.residual_q10 = kResidualQ10, s.residual_q50 = kResidualQ50, s.residual_q90 = kResidualQ90;
  const StepBand b = step_band(1.0, s);
  EXPECT_NEAR(b.p10_s, std::exp(kResidualQ10), kTol);  // 0.9542
  EXPECT_NEAR(b.p90_s, std::exp(kResidualQ90), kTol);  // 1.2181
  // The planner is optimistic on average: the band reaches further above the point than below.
  EXPECT_GT(b.p90_s - 1.0, 1.0 - b.p10_s);
}

TEST(StepBand, SourcesCombineWiderThanEachAndDeterministically) {
  BandSources s;
  s.comm_share = 0.3, s.comm_sigma = kCommBandwidthSigma, s.scale_sigma = scale_sigma(4096);
  s.residual_q10 = kResidualQ10, s.residual_q50 = kResidualQ50, s.residual_q90 = kResidualQ90;
  const StepBand b = step_band(5.0, s);
  const StepBand again = step_band(5.0, s);
  EXPECT_EQ(b.p10_s, again.p10_s);
  EXPECT_EQ(b.p90_s, again.p90_s);
  BandSources res_only;
  res_only.residual_q10 = kResidualQ10, res_only.residual_q50 = kResidualQ50, res_only.residual_q90 = kResidualQ90;
  const StepBand r = step_band(5.0, res_only);
  EXPECT_LT(b.p10_s, r.p10_s);
  EXPECT_GT(b.p90_s, r.p90_s);
  // Independent log-normal-like factors: the log-widths add in quadrature, not linearly.
  EXPECT_LT(std::log(b.p90_s / b.p10_s), std::log(r.p90_s / r.p10_s) + 2 * kZ90 * (s.scale_sigma + 0.3 * 0.0963));
}

TEST(StepBand, OverlapIncludesTouchingEnds) {
  StepBand a, b;
  a.p10_s = 1.0, a.p90_s = 2.0;
  b.p10_s = 2.0, b.p90_s = 3.0;
  EXPECT_TRUE(bands_overlap(a, b));
  EXPECT_TRUE(bands_overlap(b, a));
  b.p10_s = 2.01;
  EXPECT_FALSE(bands_overlap(a, b));
  EXPECT_FALSE(bands_overlap(b, a));
}

StepBand band(double p10, double p90) {
  StepBand b;
  b.p10_s = p10, b.p90_s = p90;
  return b;
}

TEST(StepBand, PlanMarksEveryOverlappingPairAndOnlyThose) {
  // #1 [1, 2] and #2 [1.5, 2.5] overlap; #3 [3, 4] overlaps neither.
  const std::vector<StepBand> ranked = {band(1, 2), band(1.5, 2.5), band(3, 4)};
  EXPECT_EQ(overlapping_ranks(ranked, 0), std::vector<int>{2});
  EXPECT_EQ(overlapping_ranks(ranked, 1), std::vector<int>{1});
  EXPECT_TRUE(overlapping_ranks(ranked, 2).empty());
  EXPECT_EQ(band_overlap_note(ranked), "Bands overlap, so their order is within the planner's uncertainty: #1/#2.");
  const std::vector<StepBand> apart = {band(1, 2), band(2.5, 3), band(3.5, 4)};
  EXPECT_EQ(band_overlap_note(apart), "No two layouts' bands overlap.");
  EXPECT_TRUE(overlapping_ranks(apart, 1).empty());
  const std::vector<StepBand> all = {band(1, 3), band(2, 4), band(2.5, 5)};
  EXPECT_EQ(band_overlap_note(all),
            "Bands overlap, so their order is within the planner's uncertainty: #1/#2, #1/#3, #2/#3.");
  EXPECT_EQ(overlapping_ranks(all, 2), (std::vector<int>{1, 2}));
}

const model::LlamaConfig k8bCfg = *model::preset("llama3-8b");

Layout fsdp(std::int64_t dp) {
  Layout l;
  l.dp = dp;
  return l;
}

TEST(BandSources, SoftwareSpreadOnlyWhenTheSoftwareIsNotGiven) {
  const topology::Cluster cluster = *topology::cluster_preset("dgx-h100");
  TrainingSpec t{8192, 64, Precision::kBF16};
  Result<Estimate> e = estimate(k8bCfg, cluster, t, fsdp(64), 64);
  ASSERT_TRUE(e.ok()) << e.error().message();
  Result<BandSources> given = band_sources(k8bCfg, cluster, t, *e, true);
  ASSERT_TRUE(given.ok());
  EXPECT_TRUE(given->software_ratios.empty());
  EXPECT_DOUBLE_EQ(given->comm_share, e->time.exposed_comm_s() / e->time.step_s);
  EXPECT_EQ(given->comm_sigma, kCommBandwidthSigma);
  EXPECT_EQ(given->scale_sigma, scale_sigma(64));
  EXPECT_EQ(given->residual_q90, kResidualQ90);

  Result<BandSources> open = band_sources(k8bCfg, cluster, t, *e, false);
  ASSERT_TRUE(open.ok());
  ASSERT_EQ(open->software_ratios.size(), 4u);  // fused, eager, compiled, herd
  EXPECT_EQ(open->software_ratios[0], 1.0);     // the point's own software (fused)
  TrainingSpec eager = t;
  eager.system.software = Software::kEager;
  Result<Estimate> x = estimate(k8bCfg, cluster, eager, e->layout, 64);
  ASSERT_TRUE(x.ok());
  EXPECT_DOUBLE_EQ(open->software_ratios[1], x->time.step_s / e->time.step_s);
  EXPECT_GT(open->software_ratios[1], 1.0);  // eager's unfused elementwise work is slower
  // The spread widens the band; the point is unchanged.
  const StepBand narrow = step_band(e->time.step_s, *given), wide = step_band(e->time.step_s, *open);
  EXPECT_EQ(wide.point_s, narrow.point_s);
  EXPECT_GT(wide.p90_s, narrow.p90_s);
}

TEST(BandSources, CpuHostRunsOnlyHerdSoNoSoftwareSpread) {
  const topology::Cluster cluster = *topology::cluster_preset("local-cpu");
  TrainingSpec t{256, 8, Precision::kFP32};
  t.system.software = Software::kHerd;
  const model::LlamaConfig tiny = *model::preset("tiny");
  Result<Estimate> e = estimate(tiny, cluster, t, fsdp(2), 2);
  ASSERT_TRUE(e.ok()) << e.error().message();
  Result<BandSources> s = band_sources(tiny, cluster, t, *e, false);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->software_ratios.empty());
}

}  // namespace
}  // namespace herd::planner
