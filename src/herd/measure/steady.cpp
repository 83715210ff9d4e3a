// Repeated takes of a measurement, the best kept, disturbed takes redone (measure/steady.h).
#include "herd/measure/steady.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "herd/core/format.h"
#include "herd/measure/host.h"

namespace herd::measure {

LoadProbe host_load_probe(int cores) {
  auto start = std::make_shared<HostCpuTimes>();
  return {[start] { *start = host_cpu_times(); },
          [start, cores] { return background_jobs_between(*start, host_cpu_times(), cores); }};
}

int SteadyResult::disturbed_takes() const {
  int n = 0;
  for (const Take& t : takes) n += t.disturbed.empty() ? 0 : 1;
  return n;
}

std::string SteadyResult::line() const {
  std::string s = what + ": " + std::to_string(takes.size()) + " takes, best " + format_fixed(1e3 * seconds, 2) + " ms";
  std::string why;
  for (const Take& t : takes) {
    if (t.disturbed.empty() || why.find(t.disturbed) != std::string::npos) continue;
    why += (why.empty() ? "" : "; ") + t.disturbed;
  }
  if (!why.empty()) s += " (" + std::to_string(disturbed_takes()) + " disturbed: " + why + ")";
  if (disturbed) s += "; every take was disturbed: kept the best of them, calibrate again on a quiet host";
  return s;
}

SteadyResult measure_steady(const std::string& what, const TakeFn& take, const PlausibleFn& plausible,
                            const SteadyOptions& o, const LoadProbe& probe) {
  SteadyResult r;
  r.what = what;
  const int planned = std::max(1, o.takes);
  const int most = std::max(planned, o.max_takes);
  int clean = 0;
  double best_clean = std::numeric_limits<double>::infinity(), best_any = best_clean;
  // A disturbed take does not count: takes go on until `planned` clean ones or the bound.
  for (int i = 0; i < most && clean < planned; ++i) {
    Take t;
    if (o.load_sensitive && probe.begin) probe.begin();
    t.seconds = take();
    if (o.load_sensitive && probe.end) t.background = probe.end();
    if (t.background > o.max_background) {
      t.disturbed = "other jobs ran beside it (" + format_fixed(t.background, 2) + " background jobs)";
    }
    if (plausible) {
      const std::string why = plausible(t.seconds);
      if (!why.empty()) t.disturbed += (t.disturbed.empty() ? "" : ", ") + why;
    }
    best_any = std::min(best_any, t.seconds);
    if (t.disturbed.empty()) {
      ++clean;
      best_clean = std::min(best_clean, t.seconds);
    }
    r.takes.push_back(std::move(t));
  }
  r.disturbed = clean == 0;
  r.seconds = r.disturbed ? best_any : best_clean;
  return r;
}

}  // namespace herd::measure
