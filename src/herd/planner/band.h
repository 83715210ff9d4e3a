// The step time's p10-p90 band beside the point estimate: what the step would be under the spread of
// four named sources, each documented with its source in docs/planner.md section 5.1, "Step-time band".
//
//   (a) software: when --software is not given, the step under each software preset the planner knows
//       (fused, eager, compiled, herd), each equally likely;
//   (b) communication: achieved bus bandwidth against the tier's assumed efficiency, log-normal with
//       kCommBandwidthSigma, scaling the exposed communication;
//   (c) scale: run-to-run variability and stragglers, log-normal with sigma 9% at 65,536 accelerators
//       (PRISM), growing as sqrt(ln G) below and above that (the extreme of G Gaussian speeds);
//   (d) residual: the planner's own error on tests/planner/published_runs.json, ln(measured /
//       predicted), a split normal through its 10th, 50th and 90th percentiles.
//
// The step is point x (a) x (1 - c + c x (b)) x (c) x (d) with the factors independent (c the exposed
// communication's share of the step); p10 and p90 are the quantiles of that product over a fixed
// stratified sample (kBandSamples draws, one stratum of each source's quantile function per draw,
// strata paired by fixed permutations): deterministic, and a source alone gives its own quantiles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/model/config.h"
#include "herd/planner/estimate.h"
#include "herd/planner/layout.h"
#include "herd/topology/cluster.h"

namespace herd::planner {

inline constexpr int kBandSamples = 10000;
// Standard normal 90th percentile: a log-normal source's p10 and p90 are exp(-/+ kZ90 x sigma).
inline constexpr double kZ90 = 1.2815515655446004;
// (b) achieved / nominal bus bandwidth spans 0.75 (nccl-tests all-gather, about 340 of 450 GB/s on 8
// H100s over NVLink) to 0.96 (48 of 50 GB/s per NDR NIC, NVIDIA/nccl-tests#290): that ratio, 1.28,
// taken as the p10-p90 of the communication time about the tier's own efficiency.
inline constexpr double kBusBandwidthLow = 0.75, kBusBandwidthHigh = 0.96;
inline constexpr double kCommBandwidthSigma = 0.09631;  // ln(0.96 / 0.75) / (2 kZ90)
// (c) Meta's PRISM (2025): about 9% run-to-run GPU-time variability at 64K GPUs.
inline constexpr double kScaleSigmaAtReference = 0.09;
inline constexpr double kScaleReferenceGpus = 65536;
// (d) ln(measured / predicted) over the 82 runs of tests/planner/published_runs.json (10th, 50th,
// 90th percentile, linear interpolation); tests/planner/published_runs_cli_test.cpp recomputes them from
// the estimates and holds these to them.
inline constexpr double kResidualQ10 = -0.0664, kResidualQ50 = 0.0341, kResidualQ90 = 0.1860;

struct BandSources {
  // (a) step under each software preset / the point estimate; empty: the software is given (or the
  // host runs only herd's), no spread.
  std::vector<double> software_ratios;
  double comm_share = 0;   // (b) exposed communication / step
  double comm_sigma = 0;   // (b) log-sd of the communication time
  double scale_sigma = 0;  // (c) log-sd of the whole step
  // (d) percentiles of ln(measured / predicted); all 0: off.
  double residual_q10 = 0, residual_q50 = 0, residual_q90 = 0;
};

struct StepBand {
  double point_s = 0, p10_s = 0, p90_s = 0;
  BandSources sources;
};

// (c)'s sigma at `gpus` accelerators: kScaleSigmaAtReference x sqrt(ln G / ln 65,536); 0 for one.
double scale_sigma(std::int64_t gpus);

// The band of `point_s` under `sources` (see above). Every source off: p10 = p90 = point.
StepBand step_band(double point_s, const BandSources& sources);

// The sources of an estimate: (a) from estimates of the same layout under every other software preset
// when `software_given` is false and the host is not a CPU host (herd is the only software there);
// (b) from its exposed communication; (c) from its accelerator count; (d) the residual above.
Result<BandSources> band_sources(const model::LlamaConfig& cfg, const topology::Cluster& cluster,
                                 const TrainingSpec& train, const Estimate& e, bool software_given);

// Do two bands overlap (each [p10, p90], ends included)?
bool bands_overlap(const StepBand& a, const StepBand& b);
// The 1-based ranks, other than i + 1, of the bands in `ranked` that overlap ranked[i].
std::vector<int> overlapping_ranks(const std::vector<StepBand>& ranked, std::size_t i);
// `herd plan`'s note under its ranked list: "Bands overlap, so their order is within the planner's
// uncertainty: #1/#2, #2/#3." naming every overlapping pair, or "No two layouts' bands overlap.".
std::string band_overlap_note(const std::vector<StepBand>& ranked);

}  // namespace herd::planner
