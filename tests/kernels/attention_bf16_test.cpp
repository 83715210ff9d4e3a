// The bf16 flash attention (bf16 q, k, v; fp32 sums and outputs) on each of its paths this CPU has:
// vdpbf16ps (AVX512_BF16) and the fp32 micro-GEMM on widened operands (the only one under qemu,
// kernels_isa.*). Against the double reference on the same bf16 inputs within the bound stated in
// kernels/cpu/attention_bf16.cpp; against a double reference that rounds exactly where the kernel
// does, tightly (an fp32 kernel, or one summing in bf16, fails that); the paths against each other;
// GQA, packed documents, tails, odd head dims, fused-QKV strides, a context-parallel query subset and
// a query that sees no key; and the micro-GEMM's tails and packers alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "herd/kernels/attention.h"
#include "herd/kernels/cpu/attention_impl.h"
#include "herd/kernels/cpu/cpu_features.h"
#include "herd/kernels/cpu/tile_gemm_bf16.h"
#include "herd/kernels/reference.h"
#include "kernels/attention_problem.h"
#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

using testing::Problem;
using testing::random_vec;
using testing::self_problem;

constexpr double kU = 0x1p-8;  // bf16's unit roundoff

// The kernels this CPU can run: converted to fp32, and with bf16 instructions on vdpbf16ps and, where
// the CPU and kernel have them, AMX tiles (the micro-GEMM's instruction set, cpu::TileGemmIsa).
struct PathVariant {
  Bf16AttentionPath path;
  cpu::TileGemmIsa isa;
  const char* name;
};
std::vector<PathVariant> paths() {
  std::vector<PathVariant> p{{Bf16AttentionPath::kConverted, cpu::TileGemmIsa::kAuto, "converted"}};
  if (cpu::cpu_features().avx512_bf16) {
    p.push_back({Bf16AttentionPath::kDpbf16, cpu::TileGemmIsa::kAvx512Bf16, "vdpbf16ps"});
  }
  if (cpu::have_amx_tiles()) p.push_back({Bf16AttentionPath::kDpbf16, cpu::TileGemmIsa::kAmx, "AMX"});
  return p;
}

// Puts the path back to kAuto however the test ends.
struct PathGuard {
  ~PathGuard() {
    set_bf16_attention_path(Bf16AttentionPath::kAuto);
    cpu::set_tile_gemm_isa(cpu::TileGemmIsa::kAuto);
  }
};

// body(name) once per kernel this CPU has (paths()), with it set and named in failures.
template <typename F>
void for_each_path(F body) {
  PathGuard guard;
  for (const PathVariant& v : paths()) {
    set_bf16_attention_path(v.path);
    cpu::set_tile_gemm_isa(v.isa);
    SCOPED_TRACE(v.name);
    body(v.name);
  }
}

std::vector<bf16> random_bf16(std::int64_t n, std::uint32_t seed, double lo, double hi) {
  std::vector<bf16> x(static_cast<std::size_t>(n));
  const std::vector<float> f = random_vec<float>(n, seed, lo, hi);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = to_bf16(f[i]);
  return x;
}

std::vector<double> wide(const std::vector<bf16>& x) {
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = to_float(x[i]);
  return y;
}

double rb(double x) { return round_to_bf16(static_cast<float>(x)); }

// Dense inputs: q, k, v in bf16, dout in fp32 (as the block's GEMM writes it).
struct Inputs {
  std::vector<bf16> q, k, v;
  std::vector<float> dout;
  Inputs(const AttentionDims& d, std::uint32_t seed)
      : q(random_bf16(d.batch * d.tq * d.q_heads * d.head_dim, seed, -2, 2)),
        k(random_bf16(d.batch * d.tk * d.kv_heads * d.head_dim, seed + 1, -2, 2)),
        v(random_bf16(d.batch * d.tk * d.kv_heads * d.head_dim, seed + 2, -1, 1)),
        dout(random_vec<float>(d.batch * d.tq * d.q_heads * d.head_dim, seed + 3)) {}
};

struct Outputs {
  std::vector<float> out, lse, dq, dk, dv;
  std::vector<bf16> out16;  // out rounded, as the block saves it for the backward
};

Outputs run(const Problem& p, const Inputs& x) {
  Outputs r;
  r.out.assign(x.q.size(), 0.f);
  r.lse.assign(p.d.batch * p.d.q_heads * p.d.tq, 0.f);
  r.dq.assign(x.q.size(), 0.f);
  r.dk.assign(x.k.size(), 0.f);
  r.dv.assign(x.v.size(), 0.f);
  attention_forward(p.d, p.mask(), x.q.data(), x.k.data(), x.v.data(), r.out.data(), r.lse.data());
  for (float o : r.out) r.out16.push_back(to_bf16(o));
  attention_backward(p.d, p.mask(), x.q.data(), x.k.data(), x.v.data(), r.out16.data(), r.lse.data(), x.dout.data(),
                     r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// The exact attention of the bf16 inputs (and the fp32 dout), in double.
Reference exact_reference(const Problem& p, const Inputs& x) {
  Reference r;
  const std::vector<double> q = wide(x.q), k = wide(x.k), v = wide(x.v);
  const std::vector<double> dout(x.dout.begin(), x.dout.end());
  r.out.assign(q.size(), 0.0);
  r.lse.assign(p.d.batch * p.d.q_heads * p.d.tq, 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  ref::attention_forward<double>(p.d, p.mask(), q.data(), k.data(), v.data(), r.out.data(), r.lse.data());
  ref::attention_backward<double>(p.d, p.mask(), q.data(), k.data(), v.data(), dout.data(), r.dq.data(), r.dk.data(),
                                  r.dv.data());
  return r;
}

// The kernel's recipe in double: rounded to bf16 exactly where the kernel rounds (P before P V; dO, P
// and scale dS before theirs), delta from the saved bf16 out, nothing else rounded. One key tile
// (Tk <= 64), so the running max the kernel's P is relative to is the row's max.
Reference recipe_reference(const Problem& p, const Inputs& x, const std::vector<bf16>& out16) {
  const AttentionDims& d = p.d;
  const std::int64_t D = d.head_dim, g = d.q_heads / d.kv_heads, ld_q = d.q_heads * D, ld_k = d.kv_heads * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<double> q = wide(x.q), k = wide(x.k), v = wide(x.v), o = wide(out16);
  Reference r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(d.batch * d.q_heads * d.tq, -std::numeric_limits<double>::infinity());
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  std::vector<double> s(d.tk);
  std::vector<bool> seen(d.tk);
  for (std::int64_t b = 0; b < d.batch; ++b)
    for (std::int64_t h = 0; h < d.q_heads; ++h)
      for (std::int64_t i = 0; i < d.tq; ++i) {
        const std::int64_t qi = (b * d.tq + i) * ld_q + h * D;
        auto kj = [&](std::int64_t j) { return (b * d.tk + j) * ld_k + (h / g) * D; };
        double mx = -std::numeric_limits<double>::infinity(), l = 0;
        for (std::int64_t j = 0; j < d.tk; ++j) {
          const std::int64_t bq = b * d.tq + i, bk = b * d.tk + j;
          seen[j] = p.pos_k[bk] <= p.pos_q[bq] && (p.doc_k.empty() || p.doc_k[bk] == p.doc_q[bq]);
          s[j] = 0;
          for (std::int64_t c = 0; c < D; ++c) s[j] += q[qi + c] * k[kj(j) + c];
          s[j] *= scale;
          if (seen[j]) mx = std::max(mx, s[j]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;
        for (std::int64_t j = 0; j < d.tk; ++j)
          if (seen[j]) l += std::exp(s[j] - mx);
        for (std::int64_t j = 0; j < d.tk; ++j)
          if (seen[j])
            for (std::int64_t c = 0; c < D; ++c) r.out[qi + c] += rb(std::exp(s[j] - mx)) * v[kj(j) + c] / l;
        const double lse = mx + std::log(l);
        r.lse[(b * d.q_heads + h) * d.tq + i] = lse;
        double delta = 0;
        for (std::int64_t c = 0; c < D; ++c) delta += rb(x.dout[qi + c]) * o[qi + c];
        for (std::int64_t j = 0; j < d.tk; ++j) {
          if (!seen[j]) continue;
          const double pj = std::exp(s[j] - lse);
          double dp = 0;
          for (std::int64_t c = 0; c < D; ++c) dp += rb(x.dout[qi + c]) * v[kj(j) + c];
          const double ds = rb(pj * (dp - delta) * scale);
          for (std::int64_t c = 0; c < D; ++c) {
            r.dq[qi + c] += ds * k[kj(j) + c];
            r.dk[kj(j) + c] += ds * q[qi + c];
            r.dv[kj(j) + c] += rb(pj) * rb(x.dout[qi + c]);
          }
        }
      }
  return r;
}

// max |a - b| / max |b|: the error relative to the tensor's largest entry, as docs/precision.md states
// its bounds.
template <typename A, typename B>
double normwise(const A& a, const B& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// The median of |a - b| over the largest |b|: the typical error, blind to a few entries where the
// kernel's fp32 value and the reference's double one sit on either side of a bf16 rounding boundary.
template <typename B>
double median_error(const std::vector<float>& a, const B& b) {
  std::vector<double> e(b.size());
  double scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    e[i] = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  std::nth_element(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(e.size() / 2), e.end());
  return e[e.size() / 2] / scale;
}

// The bound of attention_bf16.cpp, relative to each tensor's largest entry: out and dv carry one or two
// roundings of their factors (u each), dq and dk three (dO through dP and delta, then dS); lse none, so
// only fp32 sums and exp. With the margin of a random-sign worst case over a few thousand entries.
constexpr double kOutBound = 2 * kU, kDvBound = 3 * kU, kDqDkBound = 4 * kU, kLseBound = 2e-6;

void expect_within_bf16_bound(const Problem& p, const char* what) {
  const Inputs x(p.d, 17);
  const Reference r = exact_reference(p, x);
  for_each_path([&](const char* path) {
    const Outputs o = run(p, x);
    const double e_out = normwise(o.out, r.out), e_lse = normwise(o.lse, r.lse);
    const double e_dq = normwise(o.dq, r.dq), e_dk = normwise(o.dk, r.dk), e_dv = normwise(o.dv, r.dv);
    std::printf("bf16 attention %s, %s vs double, in u: out %.2f, dq %.2f, dk %.2f, dv %.2f; lse %.1e\n", what, path,
                e_out / kU, e_dq / kU, e_dk / kU, e_dv / kU, e_lse);
    EXPECT_LT(e_out, kOutBound);
    EXPECT_LT(e_lse, kLseBound);
    EXPECT_LT(e_dq, kDqDkBound);
    EXPECT_LT(e_dk, kDqDkBound);
    EXPECT_LT(e_dv, kDvBound);
    EXPECT_GT(e_dq, 1e-5) << "no trace of bf16 rounding";
  });
}

TEST(Bf16Attention, CausalGqaWithTailsMatchesTheDoubleReferenceWithinTheBf16Bound) {
  expect_within_bf16_bound(self_problem(2, 131, 4, 2, 64, 0), "causal GQA T=131 D=64");
}

// The tiny preset's heads (8 query heads on 4 KV heads of 32) over packed documents.
TEST(Bf16Attention, PackedDocumentsMatchTheDoubleReferenceWithinTheBf16Bound) {
  expect_within_bf16_bound(self_problem(2, 150, 8, 4, 32, 37), "documents T=150 D=32");
}

// Large enough (B * Hq * Tq * Tk * D > 4e6) for both kernels' OpenMP-parallel path.
TEST(Bf16Attention, ThreadedPathMatchesTheDoubleReferenceWithinTheBf16Bound) {
  expect_within_bf16_bound(self_problem(2, 260, 4, 2, 32, 90), "threaded T=260 D=32");
}

TEST(Bf16Attention, HeadDims128And48AndOddMatchTheDoubleReferenceWithinTheBf16Bound) {
  expect_within_bf16_bound(self_problem(1, 100, 2, 1, 128, 0), "D=128");
  expect_within_bf16_bound(self_problem(1, 77, 3, 3, 48, 30), "D=48");
  expect_within_bf16_bound(self_problem(1, 70, 4, 2, 7, 0), "D=7");
}

// Against the recipe's own double reference the kernel agrees to fp32 accuracy in a typical entry
// (the median), while against the exact attention it is u-level off: so it rounds P, dO and dS where
// FlashAttention-2 does and nowhere else, and sums in fp32 (bf16 sums would be u-level off from both).
TEST(Bf16Attention, RoundsWhereTheRecipeRoundsAndSumsInFp32) {
  for (const Problem& p : {self_problem(2, 64, 4, 2, 64, 0), self_problem(1, 57, 2, 1, 40, 23)}) {
    const Inputs x(p.d, 29);
    const Reference exact = exact_reference(p, x);
    for_each_path([&](const char* path) {
      const Outputs o = run(p, x);
      const Reference recipe = recipe_reference(p, x, o.out16);
      const std::vector<float>* got[4] = {&o.out, &o.dq, &o.dk, &o.dv};
      const std::vector<double>* want[4] = {&recipe.out, &recipe.dq, &recipe.dk, &recipe.dv};
      const std::vector<double>* plain[4] = {&exact.out, &exact.dq, &exact.dk, &exact.dv};
      const char* names[4] = {"out", "dq", "dk", "dv"};
      for (int t = 0; t < 4; ++t) {
        const double e_recipe = median_error(*got[t], *want[t]), e_exact = median_error(*got[t], *plain[t]);
        std::printf("bf16 attention %s %s, median error vs the recipe %.1e, vs exact %.1e (u = %.1e)\n", path, names[t],
                    e_recipe, e_exact, kU);
        EXPECT_LT(e_recipe, 1e-6) << names[t];
        EXPECT_GT(e_exact, 30 * e_recipe) << names[t];
      }
      EXPECT_LT(normwise(o.lse, recipe.lse), 1e-6);
    });
  }
}

// Two runs of the same bf16 attention whose sums differ in order only: every output within one unit
// roundoff (normwise), lse within 1e-6. Prints the distances in units.
void expect_within_one_unit(const char* what, const Outputs& a, const Outputs& b) {
  std::printf("bf16 attention, %s, in u: out %.3f, dq %.3f, dk %.3f, dv %.3f; lse %.1e\n", what,
              normwise(a.out, b.out) / kU, normwise(a.dq, b.dq) / kU, normwise(a.dk, b.dk) / kU,
              normwise(a.dv, b.dv) / kU, normwise(a.lse, b.lse));
  EXPECT_LT(normwise(a.out, b.out), kU);
  EXPECT_LT(normwise(a.lse, b.lse), 1e-6);
  EXPECT_LT(normwise(a.dq, b.dq), kU);
  EXPECT_LT(normwise(a.dk, b.dk), kU);
  EXPECT_LT(normwise(a.dv, b.dv), kU);
}

// Both paths form the same products (exact in fp32) and round the same fp32 values, which differ only
// by fp32 summation order: they agree far inside the bound.
TEST(Bf16Attention, ThePathsAgree) {
  if (!cpu::cpu_features().avx512_bf16) GTEST_SKIP() << "no avx512_bf16: one path";
  PathGuard guard;
  const Problem p = self_problem(2, 200, 8, 4, 32, 61);
  const Inputs x(p.d, 3);
  set_bf16_attention_path(Bf16AttentionPath::kDpbf16);
  const Outputs a = run(p, x);
  set_bf16_attention_path(Bf16AttentionPath::kConverted);
  const Outputs b = run(p, x);
  expect_within_one_unit("vdpbf16ps vs converted", a, b);
  EXPECT_EQ(bf16_attention_path(), Bf16AttentionPath::kConverted);
  set_bf16_attention_path(Bf16AttentionPath::kAuto);
  EXPECT_EQ(bf16_attention_path(), Bf16AttentionPath::kDpbf16);
  EXPECT_STREQ(bf16_attention_description(),
               cpu::have_amx_tiles() ? "AMX tiles (amx_bf16)" : "vdpbf16ps (avx512_bf16)");
}

// The tiled kernels on AMX tiles against the same kernels on vdpbf16ps: the same operands, the same
// exact products, fp32 sums that may differ in order only.
TEST(Bf16Attention, AmxTilesAgreeWithVdpbf16ps) {
  if (!cpu::have_amx_tiles()) GTEST_SKIP() << "no AMX-BF16 tiles on this CPU or kernel";
  PathGuard guard;
  for (const Problem& p : {self_problem(2, 200, 8, 4, 32, 61), self_problem(1, 130, 4, 2, 128, 62)}) {
    const Inputs x(p.d, 3);
    cpu::set_tile_gemm_isa(cpu::TileGemmIsa::kAmx);
    const Outputs a = run(p, x);
    cpu::set_tile_gemm_isa(cpu::TileGemmIsa::kAvx512Bf16);
    const Outputs b = run(p, x);
    cpu::set_tile_gemm_isa(cpu::TileGemmIsa::kAuto);
    expect_within_one_unit("AMX vs vdpbf16ps", a, b);
  }
  EXPECT_EQ(cpu::tile_gemm_isa(), cpu::TileGemmIsa::kAmx);
}

TEST(Bf16Attention, AutoPathFollowsTheCpu) {
  EXPECT_EQ(bf16_attention_path(),
            cpu::cpu_features().avx512_bf16 ? Bf16AttentionPath::kDpbf16 : Bf16AttentionPath::kConverted);
}

// q, k, v as column blocks of one fused bf16 QKV buffer, dq, dk, dv into one fused fp32 buffer, out and
// dout with a token stride of their own: the same numbers as the dense layout, bit for bit.
TEST(Bf16Attention, FusedQkvStridesGiveTheDenseResults) {
  const Problem p = self_problem(2, 77, 4, 2, 32, 30);
  const Inputs x(p.d, 5);
  const std::int64_t qd = 4 * 32, kd = 2 * 32, ld = qd + 2 * kd, ld_o = qd + 8, n = 2 * 77;
  std::vector<bf16> qkv(n * ld);
  std::vector<float> dout(n * ld_o);
  for (std::int64_t t = 0; t < n; ++t) {
    std::copy_n(x.q.begin() + t * qd, qd, qkv.begin() + t * ld);
    std::copy_n(x.k.begin() + t * kd, kd, qkv.begin() + t * ld + qd);
    std::copy_n(x.v.begin() + t * kd, kd, qkv.begin() + t * ld + qd + kd);
    std::copy_n(x.dout.begin() + t * qd, qd, dout.begin() + t * ld_o);
  }
  AttentionDims d = p.d;
  d.ld_q = d.ld_k = d.ld_v = ld;
  d.ld_o = ld_o;
  for_each_path([&](const char*) {
    const Outputs dense = run(p, x);
    std::vector<float> out(n * ld_o), lse(dense.lse.size()), dqkv(n * ld);
    std::vector<bf16> out16(n * ld_o);
    attention_forward(d, p.mask(), qkv.data(), qkv.data() + qd, qkv.data() + qd + kd, out.data(), lse.data());
    for (std::size_t i = 0; i < out.size(); ++i) out16[i] = to_bf16(out[i]);
    attention_backward(d, p.mask(), qkv.data(), qkv.data() + qd, qkv.data() + qd + kd, out16.data(), lse.data(),
                       dout.data(), dqkv.data(), dqkv.data() + qd, dqkv.data() + qd + kd);
    EXPECT_EQ(lse, dense.lse);
    for (std::int64_t t = 0; t < n; ++t) {
      for (std::int64_t e = 0; e < qd; ++e) {
        ASSERT_EQ(out[t * ld_o + e], dense.out[t * qd + e]);
        ASSERT_EQ(dqkv[t * ld + e], dense.dq[t * qd + e]);
      }
      for (std::int64_t e = 0; e < kd; ++e) {
        ASSERT_EQ(dqkv[t * ld + qd + e], dense.dk[t * kd + e]);
        ASSERT_EQ(dqkv[t * ld + qd + kd + e], dense.dv[t * kd + e]);
      }
    }
  });
}

// Context parallelism: the rank holding chunks 0 and 3 of 4 computes its queries at their global
// positions against all keys. Its rows of out, lse and dq are those of the whole sequence, and the two
// ranks' dk, dv sum to the whole sequence's (fp32 sums in another order).
TEST(Bf16Attention, ContextParallelQuerySubsetsMatchTheFullSequence) {
  const Problem full = self_problem(1, 160, 4, 2, 32, 70);
  const Inputs all_in(full.d, 11);
  const std::int64_t row = 4 * 32;
  for_each_path([&](const char*) {
    testing::expect_cp_ranks_match_full(
        full, run(full, all_in),
        [&](const testing::CpRank& cp) {
          Inputs in = all_in;
          in.q = testing::gather_rows(all_in.q, cp.global, row);
          in.dout = testing::gather_rows(all_in.dout, cp.global, row);
          return run(cp.p, in);
        },
        0, 1e-6);
  });
}

TEST(Bf16Attention, QueryWithoutVisibleKeysGivesZeroOutputAndNoGradient) {
  Problem p = self_problem(1, 10, 2, 1, 8, 0);
  for (auto& x : p.pos_k) x += 100;  // every key lies after every query
  p.pos_k[3] = 5;                    // except one, visible to queries at positions >= 5
  const Inputs x(p.d, 3);
  const Reference r = exact_reference(p, x);
  for_each_path([&](const char*) {
    const Outputs o = run(p, x);
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 10; ++i) {
        const float lse = o.lse[h * 10 + i];
        if (i < 5) {
          EXPECT_EQ(lse, -std::numeric_limits<float>::infinity());
          for (std::int64_t c = 0; c < 8; ++c) {
            EXPECT_EQ(o.out[(i * 2 + h) * 8 + c], 0.f);
            EXPECT_EQ(o.dq[(i * 2 + h) * 8 + c], 0.f);
          }
        } else {
          EXPECT_NEAR(lse, r.lse[h * 10 + i], 1e-5);
        }
      }
    // The one visible key gets P = 1, so dS = dP - delta = 0 exactly and dq, dk vanish; the kernel's
    // are fp32 noise (dP and delta summed in different orders). Errors on the scale max(1, |ref|).
    EXPECT_LT(testing::rel_error(o.out, r.out), kOutBound);
    EXPECT_LT(testing::rel_error(o.dq, r.dq), 1e-5);
    EXPECT_LT(testing::rel_error(o.dk, r.dk), 1e-5);
    EXPECT_LT(testing::rel_error(o.dv, r.dv), kDvBound);
  });
}

// The micro-GEMM alone: every row tail (blocks of 8, 4, 2, 1), column tail (one or two masked vectors)
// and odd k (a zero-padded pair), A row-major and by pairs of rows, accumulating into a strided C whose
// padding must stay untouched. Products of bf16 values are exact, so only the fp32 sum differs from
// the double one. The packers from fp32 round as core/bf16.h does.
// Both instruction sets where the CPU has them: vdpbf16ps, and AMX tiles (whole tiles read in place,
// edges and A by pairs of rows packed into zero-padded tiles).
TEST(Bf16TileGemm, EveryTailMatchesTheExactSums) {
  if (!cpu::have_dpbf16()) GTEST_SKIP() << "no avx512_bf16";
  std::vector<cpu::TileGemmIsa> isas = {cpu::TileGemmIsa::kAvx512Bf16};
  if (cpu::have_amx_tiles()) isas.push_back(cpu::TileGemmIsa::kAmx);
  for (cpu::TileGemmIsa isa : isas)
    for (std::int64_t m : {1, 3, 8, 15, 16, 33, 64})
      for (std::int64_t n : {1, 5, 16, 17, 33, 64, 70})
        for (std::int64_t k : {0, 1, 2, 7, 32, 64, 66}) {
          SCOPED_TRACE(::testing::Message()
                       << (isa == cpu::TileGemmIsa::kAmx ? "amx " : "avx512_bf16 ") << m << "x" << n << "x" << k);
          cpu::set_tile_gemm_isa(isa);
          const std::int64_t kp = (k + 1) / 2, ldc = n + 3;
          const std::vector<bf16> a = random_bf16(m * k, 1, -1, 1), b = random_bf16(k * n, 2, -1, 1);
          std::vector<float> a32(m * k), b32(k * n);  // the same values in fp32; A also transposed
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t p = 0; p < k; ++p) a32[p * m + i] = to_float(a[i * k + p]);
          for (std::int64_t i = 0; i < k * n; ++i) b32[i] = to_float(b[i]);
          std::vector<std::uint32_t> a_rows(m * kp), a_pairs(kp * m), a_pairs32(kp * m), b_v(kp * n), b_v32(kp * n);
          cpu::pack_pairs_across(a.data(), k, m, k, a_rows.data(), kp);
          cpu::pack_pairs_transposed(a.data(), k, m, k, a_pairs.data());
          cpu::pack_pairs_down(a32.data(), m, k, m, a_pairs32.data());
          cpu::pack_pairs_down(b.data(), n, k, n, b_v.data());
          cpu::pack_pairs_down(b32.data(), n, k, n, b_v32.data());
          EXPECT_EQ(a_pairs, a_pairs32);
          EXPECT_EQ(b_v, b_v32);
          const std::vector<float> c0 = random_vec<float>(m * ldc, 3);
          for (int layout = 0; layout < 2; ++layout) {
            std::vector<float> c = c0;
            if (layout == 0) {
              cpu::tile_gemm_bf16(m, n, kp, a_rows.data(), kp, 1, b_v.data(), n, c.data(), ldc, true);
            } else {
              cpu::tile_gemm_bf16(m, n, kp, a_pairs.data(), 1, m, b_v.data(), n, c.data(), ldc, true);
            }
            for (std::int64_t i = 0; i < m; ++i) {
              for (std::int64_t j = 0; j < n; ++j) {
                double want = c0[i * ldc + j], mag = std::abs(want);
                for (std::int64_t p = 0; p < k; ++p) {
                  const double t = static_cast<double>(to_float(a[i * k + p])) * to_float(b[p * n + j]);
                  want += t;
                  mag += std::abs(t);
                }
                ASSERT_NEAR(c[i * ldc + j], want, (k + 1) * 0x1p-24 * mag) << i << "," << j;
              }
              for (std::int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "padding written";
            }
          }
          // Overwriting (accumulate = false) ignores what C held: the sums accumulated onto zeros, and C's
          // padding as it was.
          std::vector<float> c = c0, c_acc(c0.size(), 0.0f);
          cpu::tile_gemm_bf16(m, n, kp, a_rows.data(), kp, 1, b_v.data(), n, c.data(), ldc, false);
          cpu::tile_gemm_bf16(m, n, kp, a_rows.data(), kp, 1, b_v.data(), n, c_acc.data(), ldc, true);
          for (std::int64_t i = 0; i < m; ++i) {
            for (std::int64_t j = 0; j < n; ++j) ASSERT_EQ(c[i * ldc + j], c_acc[i * ldc + j]) << i << "," << j;
            for (std::int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "padding written";
          }
          cpu::set_tile_gemm_isa(cpu::TileGemmIsa::kAuto);
        }
  // Rounding from fp32, both packers: nearest-even on the bit pattern, zero past an odd edge.
  const std::vector<float> x = random_vec<float>(5 * 37, 9, -3, 3);
  std::vector<std::uint32_t> across(5 * 19), down(3 * 37);
  cpu::pack_pairs_across(x.data(), 37, 5, 37, across.data(), 19);
  cpu::pack_pairs_down(x.data(), 37, 5, 37, down.data());
  for (std::int64_t r = 0; r < 5; ++r)
    for (std::int64_t c = 0; c < 37; ++c) {
      const std::uint32_t h = float_to_bf16(x[r * 37 + c]);
      EXPECT_EQ((across[r * 19 + c / 2] >> (16 * (c % 2))) & 0xffffu, h);
      EXPECT_EQ((down[(r / 2) * 37 + c] >> (16 * (r % 2))) & 0xffffu, h);
    }
  for (std::int64_t r = 0; r < 5; ++r) EXPECT_EQ(across[r * 19 + 18] >> 16, 0u);
  for (std::int64_t c = 0; c < 37; ++c) EXPECT_EQ(down[2 * 37 + c] >> 16, 0u);
  // dS computed and packed in one pass: the two packers' words of (p (dp - delta)) scale.
  const std::vector<float> p = random_vec<float>(5 * 37, 10, 0, 1), dp = random_vec<float>(5 * 37, 11);
  const std::vector<float> delta = random_vec<float>(5, 12);
  std::vector<float> ds(5 * 37);
  for (std::int64_t r = 0; r < 5; ++r)
    for (std::int64_t c = 0; c < 37; ++c) ds[r * 37 + c] = p[r * 37 + c] * (dp[r * 37 + c] - delta[r]) * 0.125f;
  std::vector<std::uint32_t> ds_down(3 * 37), ds_across(5 * 19);
  cpu::pack_pairs_across(ds.data(), 37, 5, 37, across.data(), 19);
  cpu::pack_pairs_down(ds.data(), 37, 5, 37, down.data());
  cpu::pack_scaled_ds(p.data(), dp.data(), 37, 5, 37, delta.data(), 0.125f, ds_down.data(), ds_across.data(), 19);
  EXPECT_EQ(ds_down, down);
  EXPECT_EQ(ds_across, across);
}

std::uint32_t float_bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// The forward's online softmax step in one pass (exponentials straight into the P V matmul's pairs)
// against the generic step it replaces, then the rounding packer: the same bits for the running max,
// sum and alpha and every packed P, over tails of both tile sides, masked keys, masked queries (rows
// that stay at -inf), and three tiles in a row so that alpha rescales.
TEST(Bf16OnlineSoftmax, OnePassEqualsTheGenericStepBitForBit) {
  if (!cpu::have_dpbf16()) GTEST_SKIP() << "no avx512_bf16";
  const float scale = 0.17677669f;  // 1 / sqrt(32)
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t kn : {1, 2, 37, 64})
    for (std::int64_t qn : {1, 5, 16, 23, 64}) {
      SCOPED_TRACE(::testing::Message() << "kn " << kn << " qn " << qn);
      std::vector<float> m_ref(qn, neg_inf), l_ref(qn, 0.0f), m_got = m_ref, l_got = l_ref;
      std::vector<float> a_ref(qn), a_got(qn);
      for (int tile = 0; tile < 3; ++tile) {
        // Scores growing from tile to tile (new maxima, alpha < 1), some keys and queries masked.
        std::vector<float> s = random_vec<float>(kn * qn, 40 + tile, -8.0 + 6 * tile, 8.0 + 6 * tile);
        for (std::int64_t j = 0; j < kn; ++j)
          for (std::int64_t i = 0; i < qn; ++i)
            if ((j + 2 * i + tile) % 7 == 0 || i % 5 == 3 || (tile == 0 && i % 3 == 1)) s[j * qn + i] = neg_inf;
        std::vector<float> s_ref = s;
        online_softmax<float, true>(s_ref.data(), kn, qn, scale, m_ref.data(), l_ref.data(), a_ref.data());
        std::vector<std::uint32_t> want((kn + 1) / 2 * qn), got(want.size(), 0xdeadbeefu);
        cpu::pack_pairs_down(s_ref.data(), qn, kn, qn, want.data());
        cpu::online_softmax_pairs(s.data(), kn, qn, scale, m_got.data(), l_got.data(), a_got.data(), got.data());
        for (std::size_t e = 0; e < want.size(); ++e) ASSERT_EQ(got[e], want[e]) << "pair word " << e;
        for (std::int64_t i = 0; i < qn; ++i) {
          // Bits, not values: -inf rows and signed zeros included.
          ASSERT_EQ(float_bits(m_got[i]), float_bits(m_ref[i])) << "max " << i;
          ASSERT_EQ(float_bits(l_got[i]), float_bits(l_ref[i])) << "sum " << i;
          ASSERT_EQ(float_bits(a_got[i]), float_bits(a_ref[i])) << "alpha " << i;
        }
      }
      for (std::int64_t i = 0; i < qn; ++i) EXPECT_EQ(m_got[i] == neg_inf, i % 5 == 3) << i;
    }
}

// The backward's recomputed P in one pass (in place, and packed by pairs of rows for dV) against the
// generic loop and the rounding packer: the same bits, over odd row counts, column tails, masked
// scores and a row whose lse is -inf.
TEST(Bf16OnlineSoftmax, RecomputedProbabilitiesEqualTheGenericLoopBitForBit) {
  if (!cpu::have_dpbf16()) GTEST_SKIP() << "no avx512_bf16";
  const float scale = 0.125f, neg_inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t qn : {1, 2, 7, 64})
    for (std::int64_t kn : {1, 15, 17, 64}) {
      SCOPED_TRACE(::testing::Message() << "qn " << qn << " kn " << kn);
      std::vector<float> s = random_vec<float>(qn * kn, 50, -20, 20);
      std::vector<float> lse = random_vec<float>(qn, 51, 1, 4);
      for (std::int64_t i = 0; i < qn; ++i)
        for (std::int64_t j = 0; j < kn; ++j)
          if ((i + 3 * j) % 5 == 0) s[i * kn + j] = neg_inf;
      if (qn > 2) lse[qn - 2] = neg_inf;
      std::vector<float> want_p = s, got_p = s;
      recomputed_probabilities<float>(want_p.data(), qn, kn, scale, lse.data());
      std::vector<std::uint32_t> want((qn + 1) / 2 * kn), got(want.size(), 0xdeadbeefu);
      cpu::pack_pairs_down(want_p.data(), kn, qn, kn, want.data());
      cpu::recomputed_probabilities_pairs(got_p.data(), qn, kn, scale, lse.data(), got.data());
      for (std::size_t e = 0; e < want_p.size(); ++e) ASSERT_EQ(float_bits(got_p[e]), float_bits(want_p[e])) << e;
      EXPECT_EQ(got, want);
    }
}

}  // namespace
}  // namespace herd::kernels
