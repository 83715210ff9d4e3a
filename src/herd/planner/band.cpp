#include "herd/planner/band.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace herd::planner {

namespace {

// Standard normal quantile: Newton's method on the CDF 0.5 erfc(-x / sqrt 2), from 0, each step at
// most 1 (the strata's quantiles lie within -/+3.9).
double normal_quantile(double u) {
  double x = 0;
  for (int i = 0; i < 60; ++i) {
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * 3.14159265358979323846);
    const double step = (cdf - u) / pdf;
    x -= std::clamp(step, -1.0, 1.0);
    if (std::fabs(step) < 1e-13) break;
  }
  return x;
}

// The midpoints of kBandSamples equal strata of (0, 1): (i + 0.5) / N.
double stratum(int i) { return (i + 0.5) / kBandSamples; }

// SplitMix64: a fixed sequence for the fixed permutations that pair the sources' strata.
std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr int kSources = 4;

struct Tables {
  std::vector<double> z = std::vector<double>(kBandSamples);  // normal quantile of stratum i
  // Source k uses stratum perm[k][i] in draw i.
  std::array<std::vector<int>, kSources> perm;
};

const Tables& tables() {
  static const Tables t = [] {
    Tables x;
    for (int i = 0; i < kBandSamples; ++i) x.z[i] = normal_quantile(stratum(i));
    for (int k = 0; k < kSources; ++k) {
      std::uint64_t seed = 0x68657264ull + static_cast<std::uint64_t>(k);  // "herd" + source
      x.perm[k].resize(kBandSamples);
      for (int i = 0; i < kBandSamples; ++i) x.perm[k][i] = i;
      for (int i = kBandSamples - 1; i > 0; --i) {
        const int j = static_cast<int>(splitmix(seed) % static_cast<std::uint64_t>(i + 1));
        std::swap(x.perm[k][i], x.perm[k][j]);
      }
    }
    return x;
  }();
  return t;
}

// Quantile p of sorted values, linear interpolation between order statistics.
double quantile(const std::vector<double>& sorted, double p) {
  const double h = p * static_cast<double>(sorted.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(h));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

double scale_sigma(std::int64_t gpus) {
  if (gpus <= 1) return 0;
  return kScaleSigmaAtReference * std::sqrt(std::log(static_cast<double>(gpus)) / std::log(kScaleReferenceGpus));
}

StepBand step_band(double point_s, const BandSources& s) {
  const Tables& t = tables();
  const double res_lo = (s.residual_q50 - s.residual_q10) / kZ90, res_hi = (s.residual_q90 - s.residual_q50) / kZ90;
  const std::size_t k_sw = s.software_ratios.size();
  std::vector<double> steps(kBandSamples);
  for (int i = 0; i < kBandSamples; ++i) {
    double f = 1.0;
    if (k_sw > 0) {
      // Equal strata of (0, 1) to the presets in turn: a discrete uniform choice.
      const std::size_t which =
          std::min(k_sw - 1, static_cast<std::size_t>(stratum(t.perm[0][i]) * static_cast<double>(k_sw)));
      f *= s.software_ratios[which];
    }
    if (s.comm_share > 0 && s.comm_sigma > 0) {
      f *= 1.0 - s.comm_share + s.comm_share * std::exp(s.comm_sigma * t.z[t.perm[1][i]]);
    }
    if (s.scale_sigma > 0) f *= std::exp(s.scale_sigma * t.z[t.perm[2][i]]);
    const double zr = t.z[t.perm[3][i]];
    const double r = s.residual_q50 + zr * (zr < 0 ? res_lo : res_hi);
    if (r != 0) f *= std::exp(r);
    steps[i] = point_s * f;
  }
  std::sort(steps.begin(), steps.end());
  StepBand b;
  b.point_s = point_s;
  b.p10_s = quantile(steps, 0.1);
  b.p90_s = quantile(steps, 0.9);
  b.sources = s;
  return b;
}

Result<BandSources> band_sources(const model::LlamaConfig& cfg, const topology::Cluster& cluster,
                                 const TrainingSpec& train, const Estimate& e, bool software_given) {
  BandSources s;
  const double point = e.time.step_s;
  HERD_CHECK(point > 0, "band of a step time that is not positive");
  if (!software_given && cluster.accelerator.host_cores == 0) {
    for (Software sw : {Software::kFused, Software::kEager, Software::kCompiled, Software::kHerd}) {
      if (sw == train.system.software) {
        s.software_ratios.push_back(1.0);
        continue;
      }
      // herd's runtime issues its TP collectives exposed: no preset of it overlaps them.
      if (sw == Software::kHerd && train.system.tp_overlap) continue;
      TrainingSpec other = train;
      other.system.software = sw;
      HERD_ASSIGN_OR_RETURN(const Estimate x, estimate(cfg, cluster, other, e.layout, e.gpus));
      s.software_ratios.push_back(x.time.step_s / point);
    }
  }
  s.comm_share = e.time.exposed_comm_s() / point;
  s.comm_sigma = kCommBandwidthSigma;
  s.scale_sigma = scale_sigma(e.gpus);
  s.residual_q10 = kResidualQ10, s.residual_q50 = kResidualQ50, s.residual_q90 = kResidualQ90;
  return s;
}

bool bands_overlap(const StepBand& a, const StepBand& b) {
  return std::max(a.p10_s, b.p10_s) <= std::min(a.p90_s, b.p90_s);
}

std::vector<int> overlapping_ranks(const std::vector<StepBand>& ranked, std::size_t i) {
  std::vector<int> ranks;
  for (std::size_t k = 0; k < ranked.size(); ++k) {
    if (k != i && bands_overlap(ranked[i], ranked[k])) ranks.push_back(static_cast<int>(k) + 1);
  }
  return ranks;
}

std::string band_overlap_note(const std::vector<StepBand>& ranked) {
  std::string pairs;
  for (std::size_t a = 0; a < ranked.size(); ++a) {
    for (std::size_t b = a + 1; b < ranked.size(); ++b) {
      if (!bands_overlap(ranked[a], ranked[b])) continue;
      pairs += (pairs.empty() ? "#" : ", #") + std::to_string(a + 1) + "/#" + std::to_string(b + 1);
    }
  }
  return pairs.empty() ? "No two layouts' bands overlap."
                       : "Bands overlap, so their order is within the planner's uncertainty: " + pairs + ".";
}

}  // namespace herd::planner
