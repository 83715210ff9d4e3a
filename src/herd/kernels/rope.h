// Rotary position embedding (RoPE) with Llama 3.1 frequency scaling.
//
// Frequency i of a head of width D (i < D/2) is theta^(-2i/D). Llama 3.1's "llama3" scaling divides
// the low frequencies (wavelength above original_max_pos / low_freq_factor) by `factor`, keeps the
// high ones (wavelength below original_max_pos / high_freq_factor) and blends linearly in between.
// The rotation pairs dimensions (i, i + D/2) (kHalf: Hugging Face's rotate_half layout, the layout of
// HF Llama checkpoints) or (2i, 2i + 1) (kInterleaved: Meta's complex-number layout).
//
// RopeTable precomputes cos/sin (in double, stored as T) for positions [0, max_pos), so applying RoPE
// is one table lookup per (token, frequency). Positions are per token, so a context-parallel rank
// passes the global positions of its two chunks. Backward is the inverse rotation (the transpose of
// an orthogonal map), in place.
#pragma once

#include <cstdint>
#include <vector>

#include "herd/core/bf16.h"

namespace herd::kernels {

enum class RopeLayout { kHalf, kInterleaved };

struct RopeConfig {
  std::int64_t head_dim = 0;
  double theta = 500000.0;
  double scaling_factor = 0.0;  // 0: no Llama 3.1 scaling
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_pos = 8192;
  RopeLayout layout = RopeLayout::kHalf;
};

// The D/2 inverse frequencies after scaling, in double.
std::vector<double> rope_inv_freq(const RopeConfig& cfg);

template <typename T>
class RopeTable {
 public:
  RopeTable(const RopeConfig& cfg, std::int64_t max_pos);
  const RopeConfig& config() const { return cfg_; }
  std::int64_t max_pos() const { return max_pos_; }
  const T* cos_row(std::int64_t pos) const { return cos_.data() + pos * (cfg_.head_dim / 2); }
  const T* sin_row(std::int64_t pos) const { return sin_.data() + pos * (cfg_.head_dim / 2); }

 private:
  RopeConfig cfg_;
  std::int64_t max_pos_;
  std::vector<T> cos_, sin_;  // (max_pos, D/2)
};

// x (n, heads, D) with token stride ld (elements between consecutive tokens; heads * D when dense),
// rotated in place by the angle pos[t] * inv_freq. Every position must be in [0, table.max_pos()).
template <typename T>
void rope_forward(const RopeTable<T>& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads, T* x,
                  std::int64_t ld);

// The inverse rotation, in place: turns d(rotated) into d(unrotated).
template <typename T>
void rope_backward(const RopeTable<T>& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads, T* dx,
                   std::int64_t ld);

// The same rotations of an fp32 x (or dx) written to `out` (same token stride ld) rounded to bf16 as
// to_bf16 rounds: in one pass, bit for bit the rotation in place followed by to_bf16 (bf16 mode's saved
// q and k, and the dq and dk its weight-gradient GEMMs read). x is left as it was.
void rope_forward(const RopeTable<float>& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                  const float* x, std::int64_t ld, bf16* out);
void rope_backward(const RopeTable<float>& table, const std::int32_t* pos, std::int64_t n, std::int64_t heads,
                   const float* dx, std::int64_t ld, bf16* out);

}  // namespace herd::kernels
