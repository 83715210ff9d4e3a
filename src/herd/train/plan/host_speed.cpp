// The host speed probe and its ratio to the calibration's (host_speed.h).
#include "herd/train/plan/host_speed.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "herd/kernels/speed_probe.h"

namespace herd::train {

namespace {

// 512^3: 0.27 GFLOP per GEMM, a few milliseconds on one of these cores, operands (3 MiB) in the
// caches a core's GEMM blocks use; 15 of them per core, the median kept.
constexpr std::int64_t kProbeEdge = 512;
constexpr int kProbeRepeats = 15;

}  // namespace

double probe_host_flops(int threads) {
  const std::vector<double> rates = kernels::gemm_rate_per_thread(threads, kProbeEdge, kProbeRepeats);
  if (rates.empty()) return 0;
  return std::accumulate(rates.begin(), rates.end(), 0.0) / static_cast<double>(rates.size());
}

double calibrated_probe_flops(const Json& record) {
  const auto it = record.find("host_speed_probe_flops_per_s");
  return it != record.end() && it->is_number() ? std::max(0.0, it->get<double>()) : 0.0;
}

double host_speed_ratio(double now, double calibrated) {
  if (now <= 0 || calibrated <= 0) return 1.0;
  return std::clamp(now / calibrated, 0.25, 4.0);
}

}  // namespace herd::train
