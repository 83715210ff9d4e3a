// The vdpbf16ps micro-GEMM and its packers (tile_gemm_bf16.h). Every function that executes AVX-512
// instructions carries HERD_BF16_TARGET and is reached only through the public wrappers, which the
// caller takes only when have_dpbf16(): the rest of the build stays portable x86-64 (core/cpu_isa.h).
#include "herd/kernels/cpu/tile_gemm_bf16.h"

#include <algorithm>
#include <cmath>

#include "herd/core/check.h"
#include "herd/kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define HERD_BF16_TARGET __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx512dq")))
#define HERD_ON_X86(call) call
#else
// Off x86-64 have_dpbf16() is false and nothing calls the public functions below.
#define HERD_ON_X86(call) HERD_CHECK(false, "the bf16 micro-GEMM needs AVX512_BF16 (x86-64)")
#endif

namespace herd::kernels::cpu {

bool have_dpbf16() {
#if defined(__x86_64__)
  static const bool have = cpu_features().avx512_bf16;
  return have;
#else
  return false;
#endif
}

#if defined(__x86_64__)
namespace {

// The lanes of a 16-lane vector that the first n (possibly more than 16, or none) elements fill.
inline __mmask16 lanes(std::int64_t n) {
  return n >= 16  ? static_cast<__mmask16>(0xffff)
         : n <= 0 ? static_cast<__mmask16>(0)
                  : static_cast<__mmask16>((1u << n) - 1);
}

// R rows of A by NV vectors of 16 columns of B (lanes m0, m1 of them valid), every accumulator in a
// register for the whole k loop.
template <int R, int NV>
HERD_BF16_TARGET inline __attribute__((always_inline)) void block(std::int64_t kp, const std::uint32_t* a,
                                                                  std::int64_t a_is, std::int64_t a_ps,
                                                                  const std::uint32_t* b, std::int64_t ldb, float* c,
                                                                  std::int64_t ldc, bool accumulate, __mmask16 m0,
                                                                  __mmask16 m1) {
  const __mmask16 mask[2] = {m0, m1};
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(mask[v], c + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (std::int64_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_maskz_loadu_epi32(mask[v], b + p * ldb + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * a_is + p * a_ps]));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, bv[v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mask[v], acc[r][v]);
}

// All m rows against one strip of up to 16 * NV columns: blocks of 8 rows, then 4, 2 and 1.
template <int NV>
HERD_BF16_TARGET void strip(std::int64_t m, std::int64_t kp, const std::uint32_t* a, std::int64_t a_is,
                            std::int64_t a_ps, const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc,
                            bool accumulate, __mmask16 m0, __mmask16 m1) {
  std::int64_t i = 0;
  for (; i + 8 <= m; i += 8) block<8, NV>(kp, a + i * a_is, a_is, a_ps, b, ldb, c + i * ldc, ldc, accumulate, m0, m1);
  if (m - i >= 4) {
    block<4, NV>(kp, a + i * a_is, a_is, a_ps, b, ldb, c + i * ldc, ldc, accumulate, m0, m1);
    i += 4;
  }
  if (m - i >= 2) {
    block<2, NV>(kp, a + i * a_is, a_is, a_ps, b, ldb, c + i * ldc, ldc, accumulate, m0, m1);
    i += 2;
  }
  if (m - i >= 1) block<1, NV>(kp, a + i * a_is, a_is, a_ps, b, ldb, c + i * ldc, ldc, accumulate, m0, m1);
}

HERD_BF16_TARGET void gemm_avx512(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                                  std::int64_t a_is, std::int64_t a_ps, const std::uint32_t* b, std::int64_t ldb,
                                  float* c, std::int64_t ldc, bool accumulate) {
  for (std::int64_t j0 = 0; j0 < n; j0 += 32) {
    const std::int64_t w = n - j0;
    if (w > 16) {
      strip<2>(m, kp, a, a_is, a_ps, b + j0, ldb, c + j0, ldc, accumulate, lanes(w), lanes(w - 16));
    } else {
      strip<1>(m, kp, a, a_is, a_ps, b + j0, ldb, c + j0, ldc, accumulate, lanes(w), 0);
    }
  }
}

HERD_BF16_TARGET void across_f32(const float* x, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                 std::uint32_t* dst, std::int64_t ld_dst) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    std::uint32_t* d = dst + r * ld_dst;
    for (std::int64_t j = 0; j < cols; j += 32) {
      const std::int64_t n = cols - j;
      const __m512 x0 = _mm512_maskz_loadu_ps(lanes(n), xr + j);
      const __m512 x1 = _mm512_maskz_loadu_ps(lanes(n - 16), xr + j + 16);
      // Words 0-15 from x0, 16-31 from x1: columns j .. j + 31 in order, so 16 pairs as they stand.
      _mm512_mask_storeu_epi32(d + j / 2, lanes((n + 1) / 2), (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
    }
  }
}

// 16 values of a row as the low 16 bf16 words of a vector (m of them loaded, the rest zero).
HERD_BF16_TARGET inline __attribute__((always_inline)) __m512i row16(const float* x, __mmask16 m) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(m, x));
}
HERD_BF16_TARGET inline __attribute__((always_inline)) __m512i row16(const bf16* x, __mmask16 m) {
  return _mm512_maskz_loadu_epi16(m, x);
}

// Rows 2p and 2p + 1 interleaved, 16 columns at a time: word 2i of the result is word i of the first
// row's 16, word 2i + 1 word i of the second's (32 + i in the two-vector permute).
template <typename T>
HERD_BF16_TARGET void down(const T* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) {
  static const std::uint16_t kIndex[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                           8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i index = _mm512_loadu_si512(kIndex);
  for (std::int64_t r = 0; r < rows; r += 2) {
    const T* r0 = x + r * ld;
    const T* r1 = r + 1 < rows ? r0 + ld : nullptr;
    std::uint32_t* d = dst + (r / 2) * cols;
    for (std::int64_t j = 0; j < cols; j += 16) {
      const __mmask16 mk = lanes(cols - j);
      const __m512i a0 = row16(r0 + j, mk);
      const __m512i a1 = r1 ? row16(r1 + j, mk) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(d + j, mk, _mm512_permutex2var_epi16(a0, index, a1));
    }
  }
}

HERD_BF16_TARGET void across_bf16(const bf16* x, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                  std::uint32_t* dst, std::int64_t ld_dst) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < cols; j += 32) {
      const std::int64_t n = cols - j;
      const __mmask32 mk = n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
      const __m512i w = _mm512_maskz_loadu_epi16(mk, x + r * ld + j);
      _mm512_mask_storeu_epi32(dst + r * ld_dst + j / 2, lanes((n + 1) / 2), w);
    }
  }
}

// r[i] (row i of a 16 x 16 block of 32-bit words) := column i. Unpacking pairs of rows gives, in
// each 128-bit lane L of u[4n + c], column 4L + c of rows 4n .. 4n + 3; two rounds of lane shuffles
// then gather lane L of u[c], u[4 + c], u[8 + c], u[12 + c] into column 4L + c.
HERD_BF16_TARGET inline __attribute__((always_inline)) void transpose16(__m512i r[16]) {
  // The zero-masking forms with every lane kept: the plain ones start from _mm512_undefined, which
  // GCC 12 takes for an uninitialised read (-Wmaybe-uninitialized).
  const __mmask16 all = 0xffff;
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(all, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(all, r[i], r[i + 1]);
  }
  for (int n = 0; n < 16; n += 4) {
    u[n] = _mm512_maskz_unpacklo_epi64(0xff, t[n], t[n + 2]);
    u[n + 1] = _mm512_maskz_unpackhi_epi64(0xff, t[n], t[n + 2]);
    u[n + 2] = _mm512_maskz_unpacklo_epi64(0xff, t[n + 1], t[n + 3]);
    u[n + 3] = _mm512_maskz_unpackhi_epi64(0xff, t[n + 1], t[n + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_maskz_shuffle_i32x4(all, u[c], u[4 + c], 0x88);
    const __m512i v1 = _mm512_maskz_shuffle_i32x4(all, u[c], u[4 + c], 0xdd);
    const __m512i w0 = _mm512_maskz_shuffle_i32x4(all, u[8 + c], u[12 + c], 0x88);
    const __m512i w1 = _mm512_maskz_shuffle_i32x4(all, u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_maskz_shuffle_i32x4(all, v0, w0, 0x88);
    r[8 + c] = _mm512_maskz_shuffle_i32x4(all, v0, w0, 0xdd);
    r[4 + c] = _mm512_maskz_shuffle_i32x4(all, v1, w1, 0x88);
    r[12 + c] = _mm512_maskz_shuffle_i32x4(all, v1, w1, 0xdd);
  }
}

// Blocks of 16 rows by 16 pairs, transposed in registers.
HERD_BF16_TARGET void transposed_bf16(const bf16* x, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                      std::uint32_t* dst) {
  const std::int64_t whole = cols / 2;
  for (std::int64_t j0 = 0; j0 < rows; j0 += 16) {
    const std::int64_t jn = std::min<std::int64_t>(16, rows - j0);
    for (std::int64_t p0 = 0; p0 < whole; p0 += 16) {
      const __mmask16 mk = lanes(whole - p0);
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < jn ? _mm512_maskz_loadu_epi32(mk, x + (j0 + i) * ld + 2 * p0) : _mm512_setzero_si512();
      transpose16(r);
      for (std::int64_t c = 0; c < std::min<std::int64_t>(16, whole - p0); ++c)
        _mm512_mask_storeu_epi32(dst + (p0 + c) * rows + j0, lanes(jn), r[c]);
    }
    if (cols % 2)
      for (std::int64_t j = j0; j < j0 + jn; ++j) dst[whole * rows + j] = x[j * ld + cols - 1].bits;
  }
}

HERD_BF16_TARGET void transpose_words(const std::uint32_t* x, std::int64_t ld, std::uint32_t* dst) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(x + i * ld);
  transpose16(r);
  for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + i * 16, r[i]);
}

// 16 lanes (m of them loaded) of (p (dp - d)) scale: the formula of scaled_ds in attention_impl.h, in
// the same order.
HERD_BF16_TARGET inline __attribute__((always_inline)) __m512 ds(const float* p, const float* dp, __m512 d, __m512 s,
                                                                 __mmask16 m) {
  const __m512 pd = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p), _mm512_sub_ps(_mm512_maskz_loadu_ps(m, dp), d));
  return _mm512_maskz_mul_ps(m, pd, s);  // +0 past the edge (0 (0 - d) would be -0 for d > 0)
}

HERD_BF16_TARGET void scaled_ds(const float* p, const float* dp, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                                const float* delta, float scale, std::uint32_t* down, std::uint32_t* across,
                                std::int64_t ld_across) {
  // Pairs of rows interleaved: word 2i from the first row's words (index i), 2i + 1 from the second's
  // (32 + i); the low and the high 16 columns of a 32-column block.
  static const std::uint16_t kLow[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                         8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  static const std::uint16_t kHigh[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                          24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i low = _mm512_loadu_si512(kLow), high = _mm512_loadu_si512(kHigh);
  const __m512 s = _mm512_set1_ps(scale);
  for (std::int64_t r = 0; r < rows; r += 2) {
    const bool two = r + 1 < rows;
    const __m512 d0 = _mm512_set1_ps(delta[r]), d1 = _mm512_set1_ps(two ? delta[r + 1] : 0.0f);
    const float *p0 = p + r * ld, *dp0 = dp + r * ld;
    for (std::int64_t j = 0; j < cols; j += 32) {
      const std::int64_t n = cols - j;
      const __mmask16 ma = lanes(n), mb = lanes(n - 16);
      const __m512i a0 =
          (__m512i)_mm512_cvtne2ps_pbh(ds(p0 + j + 16, dp0 + j + 16, d0, s, mb), ds(p0 + j, dp0 + j, d0, s, ma));
      const __m512i a1 = two ? (__m512i)_mm512_cvtne2ps_pbh(ds(p0 + ld + j + 16, dp0 + ld + j + 16, d1, s, mb),
                                                            ds(p0 + ld + j, dp0 + ld + j, d1, s, ma))
                             : _mm512_setzero_si512();
      const __mmask16 pairs = lanes((n + 1) / 2);
      _mm512_mask_storeu_epi32(across + r * ld_across + j / 2, pairs, a0);
      if (two) _mm512_mask_storeu_epi32(across + (r + 1) * ld_across + j / 2, pairs, a1);
      _mm512_mask_storeu_epi32(down + (r / 2) * cols + j, ma, _mm512_permutex2var_epi16(a0, low, a1));
      _mm512_mask_storeu_epi32(down + (r / 2) * cols + j + 16, mb, _mm512_permutex2var_epi16(a0, high, a1));
    }
  }
}

// common.h's fast_exp<float> on 16 lanes, operation for operation (the FMAs where GCC contracts the
// scalar code, the same clamp and rounding), so the same bits; 2^n applied by vscalefps, exact as the
// scalar code's multiplication by the power of two is.
HERD_BF16_TARGET inline __attribute__((always_inline)) __m512 exp16(__m512 x) {
  // The zero-masking forms with every lane kept, as transpose16 (GCC 12 and _mm512_undefined).
  // max(-87, x) and min(88, .) return x where x is NaN, as the scalar clamp does.
  const __mmask16 all = 0xffff;
  x = _mm512_maskz_min_ps(all, _mm512_set1_ps(88.0f), _mm512_maskz_max_ps(all, _mm512_set1_ps(-87.0f), x));
  const __m512 n = _mm512_maskz_roundscale_ps(all, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                              _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
  const __m512 r =
      _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x));
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(all, p, n);
}

// exp(s scale - m), 0 where s is -inf (masked).
HERD_BF16_TARGET inline __attribute__((always_inline)) __m512 probability(__m512 s, __m512 scale, __m512 m) {
  const __mmask16 visible = _mm512_cmp_ps_mask(s, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
  return _mm512_maskz_mov_ps(visible, exp16(_mm512_fmsub_ps(s, scale, m)));
}

// 16 lanes of two rows rounded to bf16 and interleaved into 16 pair words, the first row's value in
// each low half: down()'s layout, from values already in registers.
HERD_BF16_TARGET inline __attribute__((always_inline)) __m512i pair_words(__m512 first, __m512 second) {
  // Word 2i from word i of the rounded pair (the first row's), 2i + 1 from word 16 + i.
  static const std::uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_loadu_si512(kInterleave), (__m512i)_mm512_cvtne2ps_pbh(second, first));
}

HERD_BF16_TARGET void softmax_pairs(const float* s, std::int64_t kn, std::int64_t qn, float scale, float* row_m,
                                    float* row_l, float* alpha, std::uint32_t* pairs) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY), sc = _mm512_set1_ps(scale);
  for (std::int64_t i = 0; i < qn; i += 16) {
    const __mmask16 mk = lanes(qn - i);
    __m512 tile_m = neg_inf;
    for (std::int64_t j = 0; j < kn; ++j)
      tile_m = _mm512_maskz_max_ps(0xffff, _mm512_maskz_loadu_ps(mk, s + j * qn + i), tile_m);
    tile_m = _mm512_mul_ps(tile_m, sc);
    const __m512 old_m = _mm512_maskz_loadu_ps(mk, row_m + i);
    // std::max(row_m, tile_m): tile_m where row_m < tile_m, else row_m.
    const __m512 m = _mm512_mask_mov_ps(old_m, _mm512_cmp_ps_mask(old_m, tile_m, _CMP_LT_OQ), tile_m);
    const __mmask16 started = _mm512_cmp_ps_mask(old_m, neg_inf, _CMP_NEQ_UQ);
    const __m512 a = _mm512_maskz_mov_ps(started, exp16(_mm512_sub_ps(old_m, m)));
    __m512 l = _mm512_setzero_ps();
    for (std::int64_t j = 0; j < kn; j += 2) {
      const __m512 p0 = probability(_mm512_maskz_loadu_ps(mk, s + j * qn + i), sc, m);
      l = _mm512_add_ps(l, p0);
      __m512 p1 = _mm512_setzero_ps();
      if (j + 1 < kn) {
        p1 = probability(_mm512_maskz_loadu_ps(mk, s + (j + 1) * qn + i), sc, m);
        l = _mm512_add_ps(l, p1);
      }
      _mm512_mask_storeu_epi32(pairs + (j / 2) * qn + i, mk, pair_words(p0, p1));
    }
    _mm512_mask_storeu_ps(row_m + i, mk, m);
    _mm512_mask_storeu_ps(alpha + i, mk, a);
    _mm512_mask_storeu_ps(row_l + i, mk, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, row_l + i), a, l));
  }
}

HERD_BF16_TARGET void recomputed_pairs(float* p, std::int64_t qn, std::int64_t kn, float scale, const float* lse,
                                       std::uint32_t* pairs) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (std::int64_t i = 0; i < qn; i += 2) {
    const bool two = i + 1 < qn;
    float *p0 = p + i * kn, *p1 = two ? p0 + kn : nullptr;
    // A row whose lse is -inf (a query that sees no key) is all zeros: probability() of it would not be.
    const bool live0 = lse[i] != -INFINITY, live1 = two && lse[i + 1] != -INFINITY;
    const __m512 l0 = _mm512_set1_ps(lse[i]), l1 = _mm512_set1_ps(two ? lse[i + 1] : 0.0f);
    for (std::int64_t j = 0; j < kn; j += 16) {
      const __mmask16 mk = lanes(kn - j);
      const __m512 e0 = live0 ? probability(_mm512_maskz_loadu_ps(mk, p0 + j), sc, l0) : _mm512_setzero_ps();
      const __m512 e1 = live1 ? probability(_mm512_maskz_loadu_ps(mk, p1 + j), sc, l1) : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(p0 + j, mk, e0);
      if (two) _mm512_mask_storeu_ps(p1 + j, mk, e1);
      _mm512_mask_storeu_epi32(pairs + (i / 2) * kn + j, mk, pair_words(e0, e1));
    }
  }
}

}  // namespace
#endif

void tile_gemm_bf16(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a, std::int64_t a_is,
                    std::int64_t a_ps, const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc,
                    bool accumulate) {
  if (tile_gemm_isa() == TileGemmIsa::kAmx) {
    tile_gemm_amx(m, n, kp, a, a_is, a_ps, b, ldb, c, ldc, accumulate);
    return;
  }
  HERD_ON_X86(gemm_avx512(m, n, kp, a, a_is, a_ps, b, ldb, c, ldc, accumulate));
}

void pack_pairs_down(const float* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) {
  HERD_ON_X86(down(x, ld, rows, cols, dst));
}

void pack_pairs_across(const float* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                       std::int64_t ld_dst) {
  HERD_ON_X86(across_f32(x, ld, rows, cols, dst, ld_dst));
}

void pack_pairs_down(const bf16* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) {
  HERD_ON_X86(down(x, ld, rows, cols, dst));
}

void pack_scaled_ds(const float* p, const float* dp, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                    const float* delta, float scale, std::uint32_t* dst_down, std::uint32_t* dst_across,
                    std::int64_t ld_across) {
  HERD_ON_X86(scaled_ds(p, dp, ld, rows, cols, delta, scale, dst_down, dst_across, ld_across));
}

// The pairs of a bf16 row are its bytes as they stand: a masked copy, whose zeroed lanes past an odd
// edge are the missing partner.
void pack_pairs_across(const bf16* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                       std::int64_t ld_dst) {
  HERD_ON_X86(across_bf16(x, ld, rows, cols, dst, ld_dst));
}

void online_softmax_pairs(const float* s, std::int64_t kn, std::int64_t qn, float scale, float* row_m, float* row_l,
                          float* alpha, std::uint32_t* pairs) {
  HERD_ON_X86(softmax_pairs(s, kn, qn, scale, row_m, row_l, alpha, pairs));
}

void recomputed_probabilities_pairs(float* p, std::int64_t qn, std::int64_t kn, float scale, const float* lse,
                                    std::uint32_t* pairs) {
  HERD_ON_X86(recomputed_pairs(p, qn, kn, scale, lse, pairs));
}

void transpose_words16(const std::uint32_t* x, std::int64_t ld, std::uint32_t* dst) {
  HERD_ON_X86(transpose_words(x, ld, dst));
}

void pack_pairs_transposed(const bf16* x, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) {
  HERD_ON_X86(transposed_bf16(x, ld, rows, cols, dst));
}

}  // namespace herd::kernels::cpu
