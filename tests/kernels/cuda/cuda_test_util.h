// Shared by the CUDA kernel tests: skip without a GPU, random inputs, host <-> device round trips and
// tolerance checks against the CPU reference kernels.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "herd/core/bf16.h"
#include "herd/kernels/cuda/runtime.h"

namespace herd::kernels::cuda::testing {

// Skips the calling test, naming why, when no CUDA device is visible (every CPU-only machine).
#define HERD_REQUIRE_GPU()                                                               \
  do {                                                                                   \
    std::string herd_why_;                                                               \
    if (::herd::kernels::cuda::device_count(&herd_why_) == 0) GTEST_SKIP() << herd_why_; \
  } while (0)

inline std::vector<float> random_vector(std::int64_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<bf16> to_bf16_host(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i].bits = float_to_bf16(v[i]);
  return out;
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  DeviceBuffer<T> d(static_cast<std::int64_t>(host.size()));
  if (!host.empty()) copy_to_device(d.data(), host.data(), d.bytes());
  return d;
}

template <typename T>
std::vector<T> download(const DeviceBuffer<T>& d) {
  std::vector<T> host(static_cast<std::size_t>(d.size()));
  if (!host.empty()) copy_to_host(host.data(), d.data(), d.bytes());
  return host;
}

// |got - want| <= atol + rtol * |want| for every element; reports the first few misses.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want, double atol,
                                            double rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  int misses = 0;
  double worst = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    const double err = std::fabs(g - w);
    if (!(err <= atol + rtol * std::fabs(w))) {
      if (misses < 5) first += " [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(w);
      ++misses;
    }
    if (err > worst) worst = err;
  }
  if (misses)
    return ::testing::AssertionFailure() << misses << " of " << got.size() << " outside tolerance (worst |err| "
                                         << worst << "):" << first;
  return ::testing::AssertionSuccess();
}

}  // namespace herd::kernels::cuda::testing
