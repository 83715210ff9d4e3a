// Deterministic weight initialisation from counter-based random numbers.
//
// Every value is a pure function of (seed, tensor index, element index) through splitmix64, so the
// weights do not depend on thread counts, on the order tensors are filled in, or on the platform's
// <random> (whose distributions are implementation-defined). `fill_uniform_golden` is the exact
// generator of tools/llama_golden.py, which lets the golden test build the PyTorch model's weights
// instead of storing them.
#pragma once

#include <cmath>
#include <cstdint>

namespace herd::nn {

inline std::uint64_t splitmix64(std::uint64_t x) {
  std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits.
inline double unit_uniform(std::uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

// w[i] = center + scale * (2u - 1), u from splitmix64(tensor << 32 | i): tools/llama_golden.py's init_values.
template <typename T>
void fill_uniform_golden(T* w, std::int64_t n, std::uint64_t tensor, double center, double scale) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double u = unit_uniform(splitmix64((tensor << 32) + static_cast<std::uint64_t>(i))) * 2.0 - 1.0;
    w[i] = static_cast<T>(static_cast<float>(center + scale * u));
  }
}

// Normal(0, std) by Box-Muller on two counter-based uniforms: element i of tensor `tensor` is a pure
// function of (seed, tensor, i), so a rank that holds any shard of a tensor computes its elements from
// their global indices alone (parallel::DistributedStage::init_weights) and gets exactly the values
// the single-rank model fills.
inline std::uint64_t normal_stream(std::uint64_t seed, std::uint64_t tensor) {
  return splitmix64(seed ^ splitmix64(tensor + 0x51ED270B27B4D36Full));
}
inline double normal_at(std::uint64_t stream, std::uint64_t i, double std) {
  const std::uint64_t k = stream + 2 * i;
  const double u1 = unit_uniform(splitmix64(k)) + 0x1.0p-54;  // (0, 1): log is finite
  const double u2 = unit_uniform(splitmix64(k + 1));
  return std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

template <typename T>
void fill_normal(T* w, std::int64_t n, std::uint64_t seed, std::uint64_t tensor, double std) {
  const std::uint64_t base = normal_stream(seed, tensor);
  for (std::int64_t i = 0; i < n; ++i) w[i] = static_cast<T>(normal_at(base, static_cast<std::uint64_t>(i), std));
}

}  // namespace herd::nn
