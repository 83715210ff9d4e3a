// The CUDA attention (kernels/cuda/attention.cu) against the CPU kernel (kernels/cpu/attention.cpp) on
// random inputs, forward and backward: GQA and plain multi-head, packed documents, a context-parallel
// query subset (Tq != Tk, global positions), q/k/v as column blocks of one fused QKV buffer, queries
// that see no key, head dims 16 to 128, in fp32 and in bf16; every bf16 case on the CUDA-core kernels
// and on both tensor-core paths (WMMA and mma.sync; set_attention_kernels), plus the tensor-core
// paths' tile edges.
#include "herd/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "herd/kernels/cuda/kernels.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

using testing::all_close;
using testing::download;
using testing::random_vector;
using testing::to_bf16_host;
using testing::upload;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Problem {
  AttentionDims d;
  std::vector<std::int32_t> pos_q, doc_q, pos_k, doc_k;  // doc_* empty: one document (null pointer)
  bool fused = false;  // q/k/v (and dq/dk/dv) as column blocks of one fused (B*T, (Hq + 2 Hkv) D) buffer
};

// Self-attention over packed sequences: positions restart at 0 in each document; a boundary every
// doc_len + s tokens in sequence s (doc_len 0: one document, doc arrays null).
Problem self_problem(std::int64_t b, std::int64_t t, std::int64_t hq, std::int64_t hkv, std::int64_t dim,
                     std::int64_t doc_len = 0) {
  Problem p;
  p.d = {b, t, t, hq, hkv, dim};
  for (std::int64_t s = 0; s < b; ++s)
    for (std::int64_t i = 0; i < t; ++i) {
      const std::int64_t len = doc_len > 0 ? doc_len + s : t;
      p.pos_q.push_back(static_cast<std::int32_t>(i % len));
      if (doc_len > 0) p.doc_q.push_back(static_cast<std::int32_t>(i / len));
    }
  p.pos_k = p.pos_q;
  p.doc_k = p.doc_q;
  return p;
}

// Strides of a problem: fused QKV rows, or dense (0) with a padded out/dout row.
struct Layout {
  std::int64_t qd, kd, ld_qkv;
  std::int64_t q_size, kv_size, o_size;  // elements of the q (or fused), k, v and out buffers
};

Layout layout_of(Problem& p) {
  const AttentionDims& d = p.d;
  Layout l{};
  l.qd = d.q_heads * d.head_dim;
  l.kd = d.kv_heads * d.head_dim;
  l.ld_qkv = l.qd + 2 * l.kd;
  if (p.fused) {
    p.d.ld_q = p.d.ld_k = p.d.ld_v = l.ld_qkv;
    p.d.ld_o = l.qd + 8;  // out and dout padded too
    // One fused buffer for q, k and v: valid only for self-attention (tq == tk).
    l.q_size = d.batch * d.tq * l.ld_qkv;
    l.kv_size = 0;
    l.o_size = d.batch * d.tq * p.d.ld_o;
  } else {
    l.q_size = d.batch * d.tq * l.qd;
    l.kv_size = d.batch * d.tk * l.kd;
    l.o_size = d.batch * d.tq * l.qd;
  }
  return l;
}

AttentionMask host_mask(const Problem& p) {
  return {p.pos_q.data(), p.doc_q.empty() ? nullptr : p.doc_q.data(), p.pos_k.data(),
          p.doc_k.empty() ? nullptr : p.doc_k.data()};
}

struct DeviceMask {
  DeviceBuffer<std::int32_t> pos_q, doc_q, pos_k, doc_k;
  explicit DeviceMask(const Problem& p)
      : pos_q(upload(p.pos_q)), doc_q(upload(p.doc_q)), pos_k(upload(p.pos_k)), doc_k(upload(p.doc_k)) {}
  AttentionMask mask() const {
    return {pos_q.data(), doc_q.size() ? doc_q.data() : nullptr, pos_k.data(), doc_k.size() ? doc_k.data() : nullptr};
  }
};

// Equal infinities (lse = -inf for a query that sees no key) count as equal; everything else as
// all_close with atol = rel * max|want| (the differences are summation order and exp rounding, which
// scale with the magnitudes summed, not with each small cancelling result) and rtol = rel; `floor`
// bounds that scale from below (a tensor whose exact value is 0, as dq and dk of one-token sequences).
::testing::AssertionResult close(std::vector<float> got, std::vector<float> want, double rel, double floor = 0) {
  double scale = floor;
  for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) want[i] = got[i] = 0;
    if (std::isfinite(want[i])) scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return all_close(got, want, rel * scale, rel);
}

// Host inputs of one problem: q, k, v (or the fused buffer), dout, with NaN in every gap of a fused or
// padded row (a gap must stay untouched; NaN == NaN counts as equal in all_close).
struct Inputs {
  std::vector<float> q, k, v, dout;
};

Inputs make_inputs(const Problem& p, const Layout& l, std::uint32_t seed) {
  const AttentionDims& d = p.d;
  Inputs in;
  if (p.fused) {
    in.q = random_vector(l.q_size, seed, -2, 2);  // the q, k and v blocks of every fused row
    in.dout.assign(static_cast<std::size_t>(l.o_size), kNaN);
    const std::vector<float> go = random_vector(d.batch * d.tq * l.qd, seed + 3);
    for (std::int64_t t = 0; t < d.batch * d.tq; ++t)
      for (std::int64_t c = 0; c < l.qd; ++c) in.dout[t * p.d.ld_o + c] = go[t * l.qd + c];
  } else {
    in.q = random_vector(l.q_size, seed, -2, 2);
    in.k = random_vector(l.kv_size, seed + 1, -2, 2);
    in.v = random_vector(l.kv_size, seed + 2);
    in.dout = random_vector(l.o_size, seed + 3);
  }
  return in;
}

// The pointers of q, k, v inside a buffer set (fused: column offsets of one buffer).
template <typename T>
struct Qkv {
  T* q;
  T* k;
  T* v;
};
template <typename T>
Qkv<T> split(const Problem& p, const Layout& l, T* q, T* k, T* v) {
  if (p.fused) return {q, q + l.qd, q + l.qd + l.kd};
  return {q, k, v};
}

struct CpuResult {
  std::vector<float> out, lse, dq, dk, dv;  // fused: dq holds the fused gradient buffer
};

// The CPU kernel on the given (already bf16-rounded, for the bf16 tests) inputs; with round_out the
// forward's out is rounded to bf16 before the backward uses it (what the GPU's bf16 backward is fed).
CpuResult cpu_run(const Problem& p, const Layout& l, const Inputs& in, bool round_out) {
  CpuResult r;
  r.out.assign(static_cast<std::size_t>(l.o_size), kNaN);
  r.lse.assign(static_cast<std::size_t>(p.d.batch * p.d.q_heads * p.d.tq), kNaN);
  r.dq.assign(static_cast<std::size_t>(l.q_size), kNaN);
  r.dk.assign(static_cast<std::size_t>(l.kv_size), kNaN);
  r.dv.assign(static_cast<std::size_t>(l.kv_size), kNaN);
  const Qkv<const float> x = split<const float>(p, l, in.q.data(), in.k.data(), in.v.data());
  const AttentionMask m = host_mask(p);
  kernels::attention_forward<float>(p.d, m, x.q, x.k, x.v, r.out.data(), r.lse.data());
  if (round_out)
    for (float& o : r.out)
      if (!std::isnan(o)) o = bf16_to_float(float_to_bf16(o));
  const Qkv<float> g = split<float>(p, l, r.dq.data(), r.dk.data(), r.dv.data());
  kernels::attention_backward<float>(p.d, m, x.q, x.k, x.v, r.out.data(), r.lse.data(), in.dout.data(), g.q, g.k, g.v);
  return r;
}

void check_fp32(Problem p, std::uint32_t seed) {
  const Layout l = layout_of(p);
  const Inputs in = make_inputs(p, l, seed);
  const CpuResult want = cpu_run(p, l, in, false);

  const DeviceMask dm(p);
  auto q = upload(in.q), k = upload(in.k), v = upload(in.v), dout = upload(in.dout);
  // Outputs start as NaN: every element the kernels own must be overwritten, every gap left alone.
  auto out = upload(std::vector<float>(static_cast<std::size_t>(l.o_size), kNaN));
  auto lse = upload(std::vector<float>(want.lse.size(), kNaN));
  auto dq = upload(std::vector<float>(static_cast<std::size_t>(l.q_size), kNaN));
  auto dk = upload(std::vector<float>(static_cast<std::size_t>(l.kv_size), kNaN));
  auto dv = upload(std::vector<float>(static_cast<std::size_t>(l.kv_size), kNaN));
  const Qkv<const float> x = split<const float>(p, l, q.data(), k.data(), v.data());
  cuda::attention_forward(p.d, dm.mask(), x.q, x.k, x.v, out.data(), lse.data());
  // The backward gets the CPU's out and lse, so both sides differentiate the same forward.
  auto out_cpu = upload(want.out), lse_cpu = upload(want.lse);
  const Qkv<float> g = split<float>(p, l, dq.data(), dk.data(), dv.data());
  cuda::attention_backward(p.d, dm.mask(), x.q, x.k, x.v, out_cpu.data(), lse_cpu.data(), dout.data(), g.q, g.k, g.v);

  // fp32 on both sides; they differ by summation order and exp (expf vs the CPU's polynomial, both
  // within a few ulp): 1e-4 relative to the largest magnitude is ample for sums of a few hundred terms.
  constexpr double kRel = 1e-4;
  EXPECT_TRUE(close(download(out), want.out, kRel)) << "out";
  EXPECT_TRUE(close(download(lse), want.lse, kRel)) << "lse";
  EXPECT_TRUE(close(download(dq), want.dq, kRel)) << "dq";
  if (!p.fused) {
    EXPECT_TRUE(close(download(dk), want.dk, kRel)) << "dk";
    EXPECT_TRUE(close(download(dv), want.dv, kRel)) << "dv";
  }
}

// Sets the attention kernel selection (kernels.h) for one scope and restores the previous one.
class KernelsSwitch {
 public:
  explicit KernelsSwitch(AttentionKernels kernels) : saved_(attention_kernels()) { set_attention_kernels(kernels); }
  ~KernelsSwitch() { set_attention_kernels(saved_); }
  KernelsSwitch(const KernelsSwitch&) = delete;
  KernelsSwitch& operator=(const KernelsSwitch&) = delete;

 private:
  AttentionKernels saved_;
};

const char* kernels_name(AttentionKernels kernels) {
  switch (kernels) {
    case AttentionKernels::kCudaCores: return "CUDA cores";
    case AttentionKernels::kMma: return "tensor cores (mma)";
  }
  return "?";
}

// The bf16 kernels' recipe on the CPU (kernels/cpu/attention_bf16.cpp: P, dO and dS rounded to bf16
// where they enter a product, fp32 sums), what the tensor-core path computes in another summation
// order. out in fp32 (unrounded), out16 its bf16 rounding, which both backwards are fed.
struct RecipeResult {
  CpuResult r;
  std::vector<bf16> out16;
};
RecipeResult cpu_recipe(const Problem& p, const Layout& l, const Inputs& in) {
  RecipeResult rr;
  CpuResult& r = rr.r;
  r.out.assign(static_cast<std::size_t>(l.o_size), kNaN);
  r.lse.assign(static_cast<std::size_t>(p.d.batch * p.d.q_heads * p.d.tq), kNaN);
  r.dq.assign(static_cast<std::size_t>(l.q_size), kNaN);
  r.dk.assign(static_cast<std::size_t>(l.kv_size), kNaN);
  r.dv.assign(static_cast<std::size_t>(l.kv_size), kNaN);
  const std::vector<bf16> q16 = to_bf16_host(in.q), k16 = to_bf16_host(in.k), v16 = to_bf16_host(in.v);
  const Qkv<const bf16> x = split<const bf16>(p, l, q16.data(), k16.data(), v16.data());
  const AttentionMask m = host_mask(p);
  kernels::attention_forward(p.d, m, x.q, x.k, x.v, r.out.data(), r.lse.data());
  rr.out16 = to_bf16_host(r.out);
  const Qkv<float> g = split<float>(p, l, r.dq.data(), r.dk.data(), r.dv.data());
  kernels::attention_backward(p.d, m, x.q, x.k, x.v, rr.out16.data(), r.lse.data(), in.dout.data(), g.q, g.k, g.v);
  return rr;
}

// The GPU's bf16 forward (out widened from the kernel's bf16) and its backward fed the given bf16 out
// and lse, so that it differentiates the same forward as the reference it is compared with.
CpuResult gpu_bf16(const Problem& p, const Layout& l, const Inputs& in, const std::vector<bf16>& out16,
                   const std::vector<float>& lse_in) {
  const DeviceMask dm(p);
  auto q = upload(to_bf16_host(in.q)), k = upload(to_bf16_host(in.k)), v = upload(to_bf16_host(in.v));
  auto dout = upload(in.dout);
  // Outputs start as NaN: every element the kernels own must be overwritten, every gap left alone.
  auto out = upload(to_bf16_host(std::vector<float>(static_cast<std::size_t>(l.o_size), kNaN)));
  auto lse = upload(std::vector<float>(lse_in.size(), kNaN));
  auto dq = upload(std::vector<float>(static_cast<std::size_t>(l.q_size), kNaN));
  auto dk = upload(std::vector<float>(static_cast<std::size_t>(l.kv_size), kNaN));
  auto dv = upload(std::vector<float>(static_cast<std::size_t>(l.kv_size), kNaN));
  const Qkv<const bf16> x = split<const bf16>(p, l, q.data(), k.data(), v.data());
  cuda::attention_forward(p.d, dm.mask(), x.q, x.k, x.v, out.data(), lse.data());
  auto out_in = upload(out16);
  auto lse_up = upload(lse_in);
  const Qkv<float> g = split<float>(p, l, dq.data(), dk.data(), dv.data());
  cuda::attention_backward(p.d, dm.mask(), x.q, x.k, x.v, out_in.data(), lse_up.data(), dout.data(), g.q, g.k, g.v);
  CpuResult r;
  for (const bf16 o : download(out)) r.out.push_back(bf16_to_float(o.bits));
  r.lse = download(lse);
  r.dq = download(dq);
  r.dk = download(dk);
  r.dv = download(dv);
  return r;
}

constexpr double kU = 0x1p-8;  // bf16's unit roundoff
// The floor of the gradients' scale in the bf16 checks (close's `floor`): with one key per query
// (T = 1) P = 1 and dS = P (dP - delta) is 0 up to rounding, so dq and dk are pure noise (~1e-7 here,
// the inputs being O(1)) and nothing to scale a tolerance by. The largest dq / dk / dv entry of every
// other problem here is above 0.4 (measured on the CPU references), so the floor binds only there.
constexpr double kGradFloor = 1e-2;

// bf16 on the two GPU paths (CUDA cores and mma; the selection restored afterwards). q, k, v are rounded to bf16
// first, so the CPU references and the GPU kernels see the same values.
//   CUDA-core path (kCudaCores, or a head dim the tensor cores do not take): fp32 products of the
//   widened inputs, so it matches the CPU fp32 kernel to fp32 accuracy; the GPU rounds out to bf16, the
//   backward on both sides gets the CPU's rounded out.
//   Tensor-core path (kMma, D a multiple of 16 up to 128): P, dO and dS are rounded to bf16 where
//   they enter a product (u = 2^-8 each). Against the CPU bf16 recipe (same roundings, other summation
//   order) it agrees within one u of each tensor's largest entry (what tests/kernels/attention_bf16_test
//   holds the CPU's two bf16 paths to: only rare rounding-boundary flips of single P / dS / dO values
//   differ), out within one u (its own bf16 rounding is half a u), lse to fp32 accuracy (no rounding
//   enters it). Against the fp32 kernel, the recipe's error bound (kernels/cpu/attention_bf16.cpp): out
//   2u (P), dv 3u (P and dO), dq and dk 4u (dO through dP and delta, then dS), so a kernel that does
//   not round where the recipe does, or rounds more (bf16 sums), shows against one of the two.
void check_bf16(Problem p, std::uint32_t seed) {
  const Layout l = layout_of(p);
  Inputs in = make_inputs(p, l, seed);
  for (auto* buf : {&in.q, &in.k, &in.v})
    for (float& x : *buf)
      if (!std::isnan(x)) x = bf16_to_float(float_to_bf16(x));
  const CpuResult want = cpu_run(p, l, in, true);
  const bool tc_shape = p.d.head_dim % 16 == 0 && p.d.head_dim <= 128;

  for (const AttentionKernels kernels : {AttentionKernels::kCudaCores, AttentionKernels::kMma}) {
    SCOPED_TRACE(kernels_name(kernels));
    const KernelsSwitch sw(kernels);
    if (!(kernels != AttentionKernels::kCudaCores && tc_shape)) {
      const CpuResult got = gpu_bf16(p, l, in, to_bf16_host(want.out), want.lse);
      // out: both sides round an fp32 value to bf16; the fp32 values differ by ~1e-6 relative, which can
      // move a rounding by one bf16 ulp (2^-8 relative): rtol 2^-7 leaves a factor of two.
      EXPECT_TRUE(all_close(got.out, want.out, 1e-6, 1.0 / 128)) << "out";
      // lse and the gradients are fp32 computed from identical (bf16-valued) inputs: as tight as fp32,
      // with a factor of two for the widened-input rounding of the scale product q * scale.
      constexpr double kRel = 2e-4;
      EXPECT_TRUE(close(got.lse, want.lse, kRel)) << "lse";
      EXPECT_TRUE(close(got.dq, want.dq, kRel, kGradFloor)) << "dq";
      if (!p.fused) {
        EXPECT_TRUE(close(got.dk, want.dk, kRel, kGradFloor)) << "dk";
        EXPECT_TRUE(close(got.dv, want.dv, kRel, kGradFloor)) << "dv";
      }
      continue;
    }
    const RecipeResult recipe = cpu_recipe(p, l, in);
    const CpuResult got = gpu_bf16(p, l, in, recipe.out16, recipe.r.lse);
    const CpuResult& r = recipe.r;
    EXPECT_TRUE(close(got.out, r.out, kU)) << "out vs the bf16 recipe";
    EXPECT_TRUE(close(got.lse, r.lse, 1e-5)) << "lse vs the bf16 recipe";
    EXPECT_TRUE(close(got.dq, r.dq, kU, kGradFloor)) << "dq vs the bf16 recipe";
    EXPECT_TRUE(close(got.out, want.out, 2 * kU)) << "out vs fp32";
    EXPECT_TRUE(close(got.lse, want.lse, 1e-5)) << "lse vs fp32";
    EXPECT_TRUE(close(got.dq, want.dq, 4 * kU, kGradFloor)) << "dq vs fp32";
    if (!p.fused) {
      EXPECT_TRUE(close(got.dk, r.dk, kU, kGradFloor)) << "dk vs the bf16 recipe";
      EXPECT_TRUE(close(got.dv, r.dv, kU, kGradFloor)) << "dv vs the bf16 recipe";
      EXPECT_TRUE(close(got.dk, want.dk, 4 * kU, kGradFloor)) << "dk vs fp32";
      EXPECT_TRUE(close(got.dv, want.dv, 3 * kU, kGradFloor)) << "dv vs fp32";
    }
  }
}

// A context-parallel rank: its two query chunks at their global positions, [c, 2c) and
// [tk - 2c, tk - c), against all tk keys (positions 0..tk-1, one document).
Problem cp_problem(std::int64_t tk, std::int64_t chunk, std::int64_t hq, std::int64_t hkv, std::int64_t dim) {
  Problem p;
  p.d = {1, 2 * chunk, tk, hq, hkv, dim};
  for (std::int64_t i = 0; i < chunk; ++i) p.pos_q.push_back(static_cast<std::int32_t>(chunk + i));
  for (std::int64_t i = 0; i < chunk; ++i) p.pos_q.push_back(static_cast<std::int32_t>(tk - 2 * chunk + i));
  for (std::int64_t j = 0; j < tk; ++j) p.pos_k.push_back(static_cast<std::int32_t>(j));
  return p;
}

// Queries that see no key: keys start at position 5 (a query at 0..4 is earlier than every key), and
// some queries carry a document id no key has.
Problem blind_problem(std::int64_t dim = 32) {
  Problem p;
  p.d = {2, 70, 90, 4, 2, dim};
  for (std::int64_t s = 0; s < 2; ++s) {
    for (std::int64_t i = 0; i < 70; ++i) {
      p.pos_q.push_back(static_cast<std::int32_t>(i));
      p.doc_q.push_back(i >= 60 ? 7 : 0);  // no key is in document 7
    }
    for (std::int64_t j = 0; j < 90; ++j) {
      p.pos_k.push_back(static_cast<std::int32_t>(5 + j));
      p.doc_k.push_back(0);
    }
  }
  return p;
}

TEST(CudaAttention, GqaOneDocumentFp32) {
  HERD_REQUIRE_GPU();
  check_fp32(self_problem(2, 150, 4, 2, 64), 11);
}

TEST(CudaAttention, MultiHeadPackedDocumentsFp32) {
  HERD_REQUIRE_GPU();
  check_fp32(self_problem(2, 200, 2, 2, 32, 37), 12);
}

TEST(CudaAttention, ContextParallelQuerySubsetFp32) {
  HERD_REQUIRE_GPU();
  check_fp32(cp_problem(256, 40, 4, 1, 16), 13);
}

// The fused gradient buffer holds dq, dk and dv (same layout as q, k, v); check_fp32 compares it whole.
TEST(CudaAttention, FusedQkvStridesLlamaHeadDimFp32) {
  HERD_REQUIRE_GPU();
  Problem p = self_problem(2, 130, 4, 2, 128, 50);
  p.fused = true;
  check_fp32(p, 14);
}

TEST(CudaAttention, QueriesThatSeeNoKeyFp32) {
  HERD_REQUIRE_GPU();
  const Problem p = blind_problem();
  check_fp32(p, 15);
  // The GPU's own forward: lse = -inf and out = 0 exactly for the blind queries.
  Problem pp = p;
  const Layout l = layout_of(pp);
  const Inputs in = make_inputs(pp, l, 15);
  const DeviceMask dm(pp);
  auto q = upload(in.q), k = upload(in.k), v = upload(in.v);
  DeviceBuffer<float> out(l.o_size), lse(pp.d.batch * pp.d.q_heads * pp.d.tq);
  cuda::attention_forward(pp.d, dm.mask(), q.data(), k.data(), v.data(), out.data(), lse.data());
  const std::vector<float> o = download(out), ls = download(lse);
  for (std::int64_t s = 0; s < 2; ++s)
    for (std::int64_t h = 0; h < 4; ++h)
      for (std::int64_t i = 0; i < 70; ++i) {
        const bool blind = i < 5 || i >= 60;
        const float li = ls[static_cast<std::size_t>((s * 4 + h) * 70 + i)];
        if (blind) {
          EXPECT_EQ(li, kNegInf) << s << " " << h << " " << i;
          for (std::int64_t c = 0; c < 32; ++c)
            EXPECT_EQ(o[static_cast<std::size_t>(((s * 70 + i) * 4 + h) * 32 + c)], 0.0f);
        } else {
          EXPECT_TRUE(std::isfinite(li)) << s << " " << h << " " << i;
        }
      }
}

TEST(CudaAttention, OddHeadDimAndShortSequenceFp32) {
  HERD_REQUIRE_GPU();
  check_fp32(self_problem(3, 7, 6, 3, 24), 16);  // one partial tile; D = 24 pads to 32 columns
}

TEST(CudaAttention, GqaPackedDocumentsBf16) {
  HERD_REQUIRE_GPU();
  check_bf16(self_problem(2, 150, 4, 2, 64, 45), 21);
}

TEST(CudaAttention, ContextParallelBf16) {
  HERD_REQUIRE_GPU();
  check_bf16(cp_problem(200, 33, 2, 2, 128), 22);
}

TEST(CudaAttention, FusedQkvStridesBf16) {
  HERD_REQUIRE_GPU();
  Problem p = self_problem(1, 100, 8, 2, 128);
  p.fused = true;
  check_bf16(p, 23);
}

TEST(CudaAttention, QueriesThatSeeNoKeyBf16) {
  HERD_REQUIRE_GPU();
  check_bf16(blind_problem(), 24);
}

// The tensor-core paths' edges (check_bf16 runs all three paths; the comments there give the
// tolerances).
// Sequence lengths around the 64-row tile: a single token, one short of a tile, one past, several
// tiles with a ragged end; head dims 64 and 128 (the models'), and 16 / 48 (an odd number of 16-column
// fragments: the two warp halves of the backward split D unevenly).
TEST(CudaAttention, TensorCoreTileEdgesBf16) {
  HERD_REQUIRE_GPU();
  std::uint32_t seed = 40;
  for (const std::int64_t dim : {64, 128})
    for (const std::int64_t t : {1, 63, 65, 200}) {
      SCOPED_TRACE("D " + std::to_string(dim) + " T " + std::to_string(t));
      check_bf16(self_problem(2, t, 4, 2, dim), seed++);
    }
}

TEST(CudaAttention, TensorCoreOddFragmentCountsBf16) {
  HERD_REQUIRE_GPU();
  check_bf16(self_problem(1, 130, 2, 1, 48, 40), 50);
  check_bf16(self_problem(2, 70, 2, 2, 16), 51);
  check_bf16(self_problem(1, 90, 3, 3, 80, 33), 52);
}

// GQA group 4 (8 query heads on 2 KV heads): dK / dV sum four heads' query tiles.
TEST(CudaAttention, TensorCoreGqaGroupFourBf16) {
  HERD_REQUIRE_GPU();
  check_bf16(self_problem(2, 150, 8, 2, 64), 53);
  check_bf16(self_problem(1, 129, 8, 2, 128, 61), 54);
}

// Packed documents shorter than, equal to and longer than a tile, so whole tiles are skipped and
// others masked element-wise.
TEST(CudaAttention, TensorCorePackedDocumentsBf16) {
  HERD_REQUIRE_GPU();
  check_bf16(self_problem(2, 260, 4, 2, 64, 20), 55);
  check_bf16(self_problem(2, 260, 2, 1, 128, 64), 56);
  check_bf16(self_problem(1, 300, 4, 4, 64, 100), 57);
}

TEST(CudaAttention, TensorCoreContextParallelBf16) {
  HERD_REQUIRE_GPU();
  check_bf16(cp_problem(256, 40, 4, 1, 64), 58);
  check_bf16(cp_problem(300, 64, 8, 2, 128), 59);
}

TEST(CudaAttention, TensorCoreFusedQkvStridesBf16) {
  HERD_REQUIRE_GPU();
  Problem p = self_problem(2, 130, 8, 2, 64, 50);
  p.fused = true;
  check_bf16(p, 60);
  Problem p2 = self_problem(1, 65, 4, 4, 128);
  p2.fused = true;
  check_bf16(p2, 61);
}

// Blind queries (lse = -inf, out = 0, zero gradients) on the tensor-core path, with the exact values
// checked on the GPU's own forward as well.
TEST(CudaAttention, TensorCoreQueriesThatSeeNoKeyBf16) {
  HERD_REQUIRE_GPU();
  for (const std::int64_t dim : {64, 128}) {
    SCOPED_TRACE("D " + std::to_string(dim));
    Problem p = blind_problem(dim);
    check_bf16(p, 62);
    {
      const KernelsSwitch sw(AttentionKernels::kMma);
      const Layout l = layout_of(p);
      const Inputs in = make_inputs(p, l, 62);
      const DeviceMask dm(p);
      auto q = upload(to_bf16_host(in.q)), k = upload(to_bf16_host(in.k)), v = upload(to_bf16_host(in.v));
      DeviceBuffer<bf16> out(l.o_size);
      DeviceBuffer<float> lse(p.d.batch * p.d.q_heads * p.d.tq);
      cuda::attention_forward(p.d, dm.mask(), q.data(), k.data(), v.data(), out.data(), lse.data());
      const std::vector<bf16> o = download(out);
      const std::vector<float> ls = download(lse);
      for (std::int64_t s = 0; s < 2; ++s)
        for (std::int64_t h = 0; h < 4; ++h)
          for (std::int64_t i = 0; i < 70; ++i) {
            const bool blind = i < 5 || i >= 60;
            const float li = ls[static_cast<std::size_t>((s * 4 + h) * 70 + i)];
            if (blind) {
              EXPECT_EQ(li, kNegInf) << s << " " << h << " " << i;
              for (std::int64_t c = 0; c < dim; ++c)
                EXPECT_EQ(bf16_to_float(o[static_cast<std::size_t>(((s * 70 + i) * 4 + h) * dim + c)].bits), 0.0f);
            } else {
              EXPECT_TRUE(std::isfinite(li)) << s << " " << h << " " << i;
            }
          }
    }
  }
}

// A head dim the tensor cores do not take (24) runs the CUDA-core kernels whatever the selection.
TEST(CudaAttention, NonMultipleOf16HeadDimBf16) {
  HERD_REQUIRE_GPU();
  check_bf16(self_problem(2, 70, 4, 2, 24, 30), 63);
}

// The selection: mma.sync by default, and it reads back what was set.
TEST(CudaAttention, KernelsSwitch) {
  EXPECT_EQ(attention_kernels(), AttentionKernels::kMma);
  {
    const KernelsSwitch sw(AttentionKernels::kCudaCores);
    EXPECT_EQ(attention_kernels(), AttentionKernels::kCudaCores);
  }
  EXPECT_EQ(attention_kernels(), AttentionKernels::kMma);
}

}  // namespace
}  // namespace herd::kernels::cuda
