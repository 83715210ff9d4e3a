// Shared helpers for the kernel tests: seeded random buffers, error norms, and a central finite
// difference driver for backward checks in double precision.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace herd::kernels::testing {

template <typename T>
std::vector<T> random_vec(std::int64_t n, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

// max_i |a_i - b_i| / max(1, max_i |b_i|): relative to the reference's scale, robust to tiny entries.
template <typename A, typename B>
double rel_error(const A& a, const B& b) {
  double diff = 0, scale = 1;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

// Checks analytic gradients against central differences of loss() at `checks` coordinates of x
// (spread over the buffer, always including the first and last). Returns the worst relative error,
// measured against max(1e-3, |numeric|) so near-zero gradients do not inflate it.
inline double fd_check(std::vector<double>& x, const std::vector<double>& analytic, const std::function<double()>& loss,
                       int checks = 24, double eps = 1e-5) {
  double worst = 0;
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  for (int c = 0; c < checks && c < n; ++c) {
    const std::int64_t i = checks >= n ? c : (c * (n - 1)) / (checks - 1);
    const double saved = x[i];
    x[i] = saved + eps;
    const double lp = loss();
    x[i] = saved - eps;
    const double lm = loss();
    x[i] = saved;
    const double numeric = (lp - lm) / (2 * eps);
    worst = std::max(worst, std::abs(numeric - analytic[i]) / std::max(1e-3, std::abs(numeric)));
  }
  return worst;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace herd::kernels::testing
