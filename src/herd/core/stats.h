// Summary statistics of measured samples (step times, kernel timings) on a shared, noisy machine.
#pragma once

#include <algorithm>
#include <vector>

namespace herd {

// The median of `xs` (the mean of the two middle values for an even count); 0 for none.
inline double median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const std::size_t n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

// The arithmetic mean of `xs`; 0 for none.
inline double mean(const std::vector<double>& xs) {
  if (xs.empty()) return 0;
  double s = 0;
  for (const double x : xs) s += x;
  return s / static_cast<double>(xs.size());
}

}  // namespace herd
