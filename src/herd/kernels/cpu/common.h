// Helpers shared by the CPU kernels: a vectorisable exp, per-thread scratch, and loop partitioning.
// Every kernel with a vectorised loop carries HERD_CPU_CLONES (core/cpu_isa.h): it is compiled for
// AVX-512, AVX2 and baseline x86-64 and the CPU picks at load time.
//
// std::exp does not vectorise without -ffast-math, and softmax-style loops (attention, cross-entropy)
// spend their non-GEMM time in exp. fast_exp<float> is a branch-free Cephes-style range reduction
// (x = n ln2 + r, |r| <= ln2/2) with a degree-6 polynomial, accurate to about 2 ulp for x in
// [-87, 88]; below that it returns ~1e-38 rather than 0, so callers zero masked entries explicitly.
// fast_exp<double> is std::exp: the double path is the parity-test path, not a fast one.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "herd/core/aligned.h"
#include "herd/core/bf16.h"
#include "herd/core/cpu_isa.h"  // HERD_CPU_CLONES: the kernels that carry it are built per ISA level

namespace herd::kernels::cpu {

// c ? a : b on the bits, without a branch. Written as a conditional before or around an inlined
// fast_exp, the conditional left GCC 12 a branch per element (partial redundancy elimination
// specialises the code after it for the constant arm), so every loop that called fast_exp stayed
// scalar in the AVX2 and baseline clones: SwiGLU, the softmaxes and cross-entropy ran one lane at a
// time there. The masks vectorise on every ISA level.
template <typename T>
inline T select_bits(bool c, T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  const Bits m = -static_cast<Bits>(c);
  return std::bit_cast<T>((std::bit_cast<Bits>(a) & m) | (std::bit_cast<Bits>(b) & ~m));
}

// x, rounded as written: an expression GCC may not fuse into a following add (no FMA contraction).
inline float rounded(float x) {
#if defined(__has_builtin)
#if __has_builtin(__builtin_assoc_barrier)
  return __builtin_assoc_barrier(x);
#endif
#endif
  return x;
}

template <typename T>
inline T fast_exp(T x) {
  return std::exp(x);
}

template <>
inline float fast_exp<float>(float x) {
  x = select_bits(x < -87.0f, -87.0f, select_bits(x > 88.0f, 88.0f, x));
  // n = x log2(e) rounded to nearest (ties to even, as std::nearbyint in the default rounding mode):
  // adding and taking back 1.5 x 2^23 leaves no fraction bits for |n| < 2^22, and needs no rounding
  // instruction (SSE2 has none). The product is rounded first, as in nearbyint(x log2(e)) and in
  // tile_gemm_bf16.cpp's exp16, so every path gets the same n.
  constexpr float kRound = 12582912.0f;
  const float n = (rounded(x * 1.44269504088896341f) + kRound) - kRound;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // A NaN x leaves n NaN, which has no int value: 0 stands in for it, and p (NaN through r) makes the
  // result NaN. Callers select away an exponent they do not use (select_bits computes both arms), so a
  // NaN reaches here from -inf - -inf too.
  const std::int32_t bits = (static_cast<std::int32_t>(select_bits(n != n, 0.0f, n)) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// The largest of x[0, n) (-inf for n = 0; NaNs are passed over, as std::max(m, x) passes them). Kept
// as 16 running maxima, then folded: `x > m ? x : m` is what vmaxps computes, so each lane is one
// instruction without fast-math, where GCC leaves a max *reduction* (`omp simd reduction(max : m)` over
// std::max) scalar. Callers are HERD_CPU_CLONES kernels: inlined, it takes their ISA.
template <typename T>
inline T row_max(const T* x, std::int64_t n) {
  constexpr int L = 16;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  T m[L];
  for (int l = 0; l < L; ++l) m[l] = neg_inf;
  std::int64_t j = 0;
  for (; j + L <= n; j += L) {
#pragma omp simd
    for (int l = 0; l < L; ++l) m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
  }
  for (; j < n; ++j) m[0] = x[j] > m[0] ? x[j] : m[0];
  T r = neg_inf;
  for (int l = 0; l < L; ++l) r = m[l] > r ? m[l] : r;
  return r;
}

// sum_{j < n} term(j) in an order the code fixes, not the vectoriser: 16 running sums (term j goes to
// sum j mod 16, j ascending), then the 16 added in order. The lanes are one vector op each, as an `omp
// simd` reduction is, but the bits are the same whatever the ISA clone and whatever storage type
// `term` reads (a reduction's order depends on both: bf16 and fp32 inputs were summed differently on
// AVX2). Callers are HERD_CPU_CLONES kernels: inlined, it takes their ISA.
template <typename T, typename Term>
inline T lane_sum(std::int64_t n, Term term) {
  constexpr int L = 16;
  T s[L] = {};
  std::int64_t j = 0;
  for (; j + L <= n; j += L) {
#pragma omp simd
    for (int l = 0; l < L; ++l) s[l] += term(j + l);
  }
  for (int l = 0; j + l < n; ++l) s[l] += term(j + l);
  T r = s[0];
  for (int l = 1; l < L; ++l) r += s[l];
  return r;
}

// A stored element as the compute type reads it (bf16 widened, exactly), and a computed value stored:
// itself, or rounded to bf16 (core/bf16.h's nearest-even). Kernels templated over their storage types
// read and write through these.
inline float widen(bf16 x) { return to_float(x); }
inline float widen(float x) { return x; }
inline double widen(double x) { return x; }
template <typename T>
inline void put(T v, T& out) {
  out = v;
}
inline void put(float v, bf16& out) { out.bits = float_to_bf16(v); }

// Bytes this thread holds in thread_scratch buffers (kernels/scratch.h reports it).
inline thread_local std::int64_t thread_scratch_held = 0;

// A buffer owned by the calling thread that only grows: kernels reuse it across calls, so the
// training step does not allocate after its first iteration. It starts on a cache line, as the arena's
// tensors do: GEMMs on it (the cross-entropy's logits tiles) would run up to a quarter slower on rows
// that straddle two lines (core/aligned.h).
template <typename T, int kSlot = 0>
T* thread_scratch(std::size_t n) {
  thread_local AlignedVector<T> buf;
  if (buf.size() < n) {
    const std::size_t before = buf.capacity();
    buf.resize(n);
    thread_scratch_held += static_cast<std::int64_t>((buf.capacity() - before) * sizeof(T));
  }
  return buf.data();
}

// [begin, end) of chunk `i` of `parts` near-equal chunks of [0, n).
inline void partition(std::int64_t n, int parts, int i, std::int64_t* begin, std::int64_t* end) {
  const std::int64_t base = n / parts, extra = n % parts;
  *begin = i * base + (i < extra ? i : extra);
  *end = *begin + base + (i < extra ? 1 : 0);
}

}  // namespace herd::kernels::cpu
