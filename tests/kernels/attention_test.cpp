// Flash-style attention against the naive reference (full score rows), in float and double, with
// GQA, odd lengths, packed documents, fused-QKV strides, a context-parallel query subset, and a
// finite-difference check of the backward.
#include "herd/kernels/attention.h"

#include <gtest/gtest.h>

#include <limits>

#include "herd/kernels/reference.h"
#include "kernels/attention_problem.h"
#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

using testing::Problem;
using testing::random_vec;
using testing::rel_error;
using testing::self_problem;

template <typename T>
struct Buffers {
  std::vector<T> q, k, v, out, lse, dout, dq, dk, dv;
  Buffers(const AttentionDims& d, std::uint32_t seed) {
    q = random_vec<T>(d.batch * d.tq * d.q_heads * d.head_dim, seed, -2, 2);
    k = random_vec<T>(d.batch * d.tk * d.kv_heads * d.head_dim, seed + 1, -2, 2);
    v = random_vec<T>(d.batch * d.tk * d.kv_heads * d.head_dim, seed + 2);
    dout = random_vec<T>(q.size(), seed + 3);
    out.assign(q.size(), T(0));
    dq.assign(q.size(), T(0));
    lse.assign(d.batch * d.q_heads * d.tq, T(0));
    dk.assign(k.size(), T(0));
    dv.assign(v.size(), T(0));
  }
  void fast(const Problem& p) {
    attention_forward<T>(p.d, p.mask(), q.data(), k.data(), v.data(), out.data(), lse.data());
    attention_backward<T>(p.d, p.mask(), q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                          dk.data(), dv.data());
  }
  void reference(const Problem& p) {
    ref::attention_forward<T>(p.d, p.mask(), q.data(), k.data(), v.data(), out.data(), lse.data());
    ref::attention_backward<T>(p.d, p.mask(), q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(),
                               dv.data());
  }
};

template <typename T>
void expect_matches_reference(const Problem& p, double tol) {
  Buffers<T> fast(p.d, 7), slow(p.d, 7);
  fast.fast(p);
  slow.reference(p);
  EXPECT_LT(rel_error(fast.out, slow.out), tol);
  EXPECT_LT(rel_error(fast.lse, slow.lse), tol);
  EXPECT_LT(rel_error(fast.dq, slow.dq), tol);
  EXPECT_LT(rel_error(fast.dk, slow.dk), tol);
  EXPECT_LT(rel_error(fast.dv, slow.dv), tol);
}

TEST(Attention, CausalGqaOddLengthFloat) { expect_matches_reference<float>(self_problem(2, 131, 4, 2, 16, 0), 2e-5); }

TEST(Attention, DocumentMaskFloatAndDouble) {
  expect_matches_reference<float>(self_problem(2, 150, 6, 2, 8, 37), 2e-5);
  expect_matches_reference<double>(self_problem(2, 150, 6, 2, 8, 37), 1e-12);
}

// Large enough (B * Hq * Tq * Tk * D > 4e6) for the OpenMP-parallel path of both kernels.
TEST(Attention, ThreadedPathMatchesReference) {
  expect_matches_reference<float>(self_problem(2, 260, 4, 2, 32, 90), 2e-5);
}

TEST(Attention, MultiHeadAndOddHeadDimDouble) {
  expect_matches_reference<double>(self_problem(1, 70, 3, 3, 5, 0), 1e-12);
  expect_matches_reference<double>(self_problem(1, 65, 4, 1, 40, 20), 1e-12);
}

// Context parallelism: a sequence cut into 4 chunks; the rank holding chunks 0 and 3 computes its
// queries at their global positions against all keys. Its rows of out/lse/dq must equal those of the
// full computation, and the two ranks' dk/dv must sum to the full dk/dv.
TEST(Attention, ContextParallelQuerySubsetsMatchFullSequence) {
  const Problem full = self_problem(1, 96, 4, 2, 8, 41);
  Buffers<double> all(full.d, 11);
  all.fast(full);
  const std::int64_t row = 4 * 8;
  testing::expect_cp_ranks_match_full(
      full, all,
      [&](const testing::CpRank& cp) {
        Buffers<double> local(cp.p.d, 11);
        local.k = all.k;
        local.v = all.v;
        local.q = testing::gather_rows(all.q, cp.global, row);
        local.dout = testing::gather_rows(all.dout, cp.global, row);
        local.fast(cp.p);
        return local;
      },
      1e-12, 1e-12);
}

// q, k, v as column blocks of one fused (B*T, (Hq + 2 Hkv) * D) buffer, as a fused QKV GEMM writes them.
TEST(Attention, FusedQkvStridesMatchDenseLayout) {
  Problem p = self_problem(2, 77, 4, 2, 8, 30);
  Buffers<double> dense(p.d, 5);
  dense.fast(p);
  const std::int64_t qd = 4 * 8, kd = 2 * 8, ld = qd + 2 * kd, n = 2 * 77;
  std::vector<double> qkv(n * ld), dqkv(n * ld, 0.0);
  for (std::int64_t t = 0; t < n; ++t) {
    std::copy(dense.q.begin() + t * qd, dense.q.begin() + (t + 1) * qd, qkv.begin() + t * ld);
    std::copy(dense.k.begin() + t * kd, dense.k.begin() + (t + 1) * kd, qkv.begin() + t * ld + qd);
    std::copy(dense.v.begin() + t * kd, dense.v.begin() + (t + 1) * kd, qkv.begin() + t * ld + qd + kd);
  }
  AttentionDims d = p.d;
  d.ld_q = d.ld_k = d.ld_v = ld;
  std::vector<double> out(n * qd), lse(dense.lse.size());
  attention_forward<double>(d, p.mask(), qkv.data(), qkv.data() + qd, qkv.data() + qd + kd, out.data(), lse.data());
  attention_backward<double>(d, p.mask(), qkv.data(), qkv.data() + qd, qkv.data() + qd + kd, out.data(), lse.data(),
                             dense.dout.data(), dqkv.data(), dqkv.data() + qd, dqkv.data() + qd + kd);
  EXPECT_LT(rel_error(out, dense.out), 1e-13);
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t e = 0; e < qd; ++e) ASSERT_NEAR(dqkv[t * ld + e], dense.dq[t * qd + e], 1e-13);
    for (std::int64_t e = 0; e < kd; ++e) {
      ASSERT_NEAR(dqkv[t * ld + qd + e], dense.dk[t * kd + e], 1e-13);
      ASSERT_NEAR(dqkv[t * ld + qd + kd + e], dense.dv[t * kd + e], 1e-13);
    }
  }
}

TEST(Attention, QueryWithoutVisibleKeysGivesZeroOutput) {
  Problem p = self_problem(1, 10, 2, 1, 4, 0);
  for (auto& x : p.pos_k) x += 100;  // every key lies after every query
  p.pos_k[3] = 5;                    // except one, visible to queries at positions >= 5
  Buffers<double> b(p.d, 3), r(p.d, 3);
  b.fast(p);
  r.reference(p);
  EXPECT_EQ(b.out[0], 0.0);
  EXPECT_EQ(b.lse[0], -std::numeric_limits<double>::infinity());
  EXPECT_LT(rel_error(b.out, r.out), 1e-13);
  EXPECT_LT(rel_error(b.dq, r.dq), 1e-13);
  EXPECT_LT(rel_error(b.dk, r.dk), 1e-13);
  EXPECT_LT(rel_error(b.dv, r.dv), 1e-13);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  Problem p = self_problem(1, 11, 4, 2, 6, 5);
  Buffers<double> b(p.d, 9);
  b.fast(p);
  std::vector<double> out(b.out.size()), lse(b.lse.size());
  auto loss = [&] {
    attention_forward<double>(p.d, p.mask(), b.q.data(), b.k.data(), b.v.data(), out.data(), lse.data());
    return testing::dot(out, b.dout);
  };
  EXPECT_LT(testing::fd_check(b.q, b.dq, loss), 1e-6);
  EXPECT_LT(testing::fd_check(b.k, b.dk, loss), 1e-6);
  EXPECT_LT(testing::fd_check(b.v, b.dv, loss), 1e-6);
}

}  // namespace
}  // namespace herd::kernels
