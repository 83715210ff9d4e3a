// Embedding, RMSNorm and SwiGLU against their references (float; double to 1e-12), their gradient
// contracts (+= where documented), and finite-difference checks of each backward in double.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "herd/kernels/embedding.h"
#include "herd/kernels/reference.h"
#include "herd/kernels/rmsnorm.h"
#include "herd/kernels/swiglu.h"
#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

using testing::random_vec;
using testing::rel_error;

TEST(Embedding, LookupAndScatterAddWithShard) {
  const std::int64_t vocab = 11, dim = 7;
  const std::vector<std::int32_t> ids = {3, 0, 10, 3, 7, 3};
  auto table = random_vec<float>(vocab * dim, 1);
  std::vector<float> out(ids.size() * dim);
  embedding_forward<float>(ids.data(), 6, table.data(), 0, vocab, dim, out.data());
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::int64_t j = 0; j < dim; ++j) EXPECT_EQ(out[i * dim + j], table[ids[i] * dim + j]);
  // A shard holding rows [3, 8): the others read as zeros and receive nothing.
  std::vector<float> shard_out(out.size());
  embedding_forward<float>(ids.data(), 6, table.data() + 3 * dim, 3, 5, dim, shard_out.data());
  EXPECT_EQ(shard_out[0], table[3 * dim]);
  EXPECT_EQ(shard_out[dim], 0.0f);
  auto dout = random_vec<float>(out.size(), 2);
  std::vector<float> dtable(vocab * dim, 1.0f);  // accumulates onto existing values
  embedding_backward<float>(ids.data(), 6, dout.data(), 0, vocab, dim, dtable.data());
  for (std::int64_t j = 0; j < dim; ++j) {
    EXPECT_FLOAT_EQ(dtable[3 * dim + j], 1.0f + dout[j] + dout[3 * dim + j] + dout[5 * dim + j]);
    EXPECT_FLOAT_EQ(dtable[1 * dim + j], 1.0f);
  }
  std::vector<float> dshard(5 * dim, 0.0f);
  embedding_backward<float>(ids.data(), 6, dout.data(), 3, 5, dim, dshard.data());
  for (std::int64_t j = 0; j < dim; ++j) EXPECT_FLOAT_EQ(dshard[4 * dim + j], dout[4 * dim + j]);  // id 7
}

template <typename T>
void rmsnorm_case(std::int64_t n, std::int64_t dim, double tol) {
  const double eps = 1e-5;
  auto x = random_vec<T>(n * dim, 3, -2, 2), w = random_vec<T>(dim, 4, 0.5, 1.5), dy = random_vec<T>(n * dim, 5);
  std::vector<T> y(n * dim), r(n), y_ref(n * dim), r_ref(n);
  rmsnorm_forward<T>(x.data(), dim, w.data(), n, dim, eps, y.data(), dim, r.data());
  ref::rmsnorm_forward<T>(x.data(), w.data(), n, dim, eps, y_ref.data(), r_ref.data());
  EXPECT_LT(rel_error(y, y_ref), tol);
  EXPECT_LT(rel_error(r, r_ref), tol);
  std::vector<T> dx(n * dim, T(0)), dw(dim, T(0.5)), dx_ref(n * dim), dw_ref(dim, T(0.5));
  rmsnorm_backward<T>(dy.data(), dim, x.data(), dim, w.data(), r.data(), n, dim, dx.data(), dim, Accumulate::kOverwrite,
                      dw.data());
  ref::rmsnorm_backward<T>(dy.data(), x.data(), w.data(), n, dim, eps, dx_ref.data(), dw_ref.data());
  EXPECT_LT(rel_error(dx, dx_ref), tol);
  EXPECT_LT(rel_error(dw, dw_ref), tol);
  // kAdd adds the same gradient on top.
  std::vector<T> dx2 = dx, dw2(dim, T(0));
  rmsnorm_backward<T>(dy.data(), dim, x.data(), dim, w.data(), r.data(), n, dim, dx2.data(), dim, Accumulate::kAdd,
                      dw2.data());
  for (std::int64_t i = 0; i < n * dim; ++i) EXPECT_NEAR(dx2[i], 2 * dx[i], 4 * tol * (1 + std::abs(dx[i])));
}

TEST(RmsNorm, MatchesReference) {
  rmsnorm_case<float>(37, 129, 2e-5);
  rmsnorm_case<float>(300, 512, 2e-5);  // large enough for the threaded path
  rmsnorm_case<double>(37, 129, 1e-12);
  rmsnorm_case<double>(300, 512, 1e-12);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  const std::int64_t n = 5, dim = 9;
  auto x = random_vec<double>(n * dim, 6, -2, 2), w = random_vec<double>(dim, 7, 0.5, 1.5);
  auto g = random_vec<double>(n * dim, 8);
  std::vector<double> y(n * dim), r(n), dx(n * dim), dw(dim, 0.0);
  rmsnorm_forward<double>(x.data(), dim, w.data(), n, dim, 1e-5, y.data(), dim, r.data());
  rmsnorm_backward<double>(g.data(), dim, x.data(), dim, w.data(), r.data(), n, dim, dx.data(), dim,
                           Accumulate::kOverwrite, dw.data());
  auto loss = [&] {
    rmsnorm_forward<double>(x.data(), dim, w.data(), n, dim, 1e-5, y.data(), dim, r.data());
    return testing::dot(y, g);
  };
  EXPECT_LT(testing::fd_check(x, dx, loss), 1e-7);
  EXPECT_LT(testing::fd_check(w, dw, loss), 1e-7);
}

template <typename T>
void swiglu_case(std::int64_t n, std::int64_t width, double tol) {
  // gate and up side by side in one (n, 2 * width) buffer, as a fused gate/up GEMM writes them.
  auto gu = random_vec<T>(n * 2 * width, 9, -6, 6), dout = random_vec<T>(n * width, 10);
  std::vector<T> gate(n * width), up(n * width);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < width; ++j) {
      gate[i * width + j] = gu[i * 2 * width + j];
      up[i * width + j] = gu[i * 2 * width + width + j];
    }
  std::vector<T> out(n * width), out_ref(n * width);
  swiglu_forward<T>(gu.data(), 2 * width, gu.data() + width, 2 * width, n, width, out.data(), width);
  ref::swiglu_forward<T>(gate.data(), up.data(), n * width, out_ref.data());
  EXPECT_LT(rel_error(out, out_ref), tol);
  std::vector<T> dgu(n * 2 * width), dg_ref(n * width), du_ref(n * width), dg(n * width), du(n * width);
  swiglu_backward<T>(dout.data(), width, gu.data(), 2 * width, gu.data() + width, 2 * width, n, width, dgu.data(),
                     2 * width, dgu.data() + width, 2 * width);
  ref::swiglu_backward<T>(dout.data(), gate.data(), up.data(), n * width, dg_ref.data(), du_ref.data());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < width; ++j) {
      dg[i * width + j] = dgu[i * 2 * width + j];
      du[i * width + j] = dgu[i * 2 * width + width + j];
    }
  EXPECT_LT(rel_error(dg, dg_ref), tol);
  EXPECT_LT(rel_error(du, du_ref), tol);
}

// bf16 mode's norms on the saved tensors: x read as bf16 and y rounded as written give the bits of
// widening x, the fp32 kernel and rounding y after (forward), and of the fp32 backward on widened x
// (dx overwritten and accumulated, dw): every width around the vector blocks, strided rows, and a size
// that runs threaded.
TEST(RmsNorm, Bf16StorageEqualsWideningAndRoundingAroundTheFp32KernelBitForBit) {
  for (const auto& [n, dim] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 1}, {5, 15}, {4, 16}, {7, 33}, {2, 256}, {200, 256}}) {
    SCOPED_TRACE(::testing::Message() << n << " x " << dim);
    const std::int64_t ld = dim + 3;
    std::vector<bf16> x16(n * ld);
    std::vector<float> x32(n * ld);
    const std::vector<float> xr = testing::random_vec<float>(n * ld, 7, -3, 3);
    for (std::int64_t i = 0; i < n * ld; ++i) x16[i] = herd::to_bf16(xr[i]), x32[i] = herd::to_float(x16[i]);
    const std::vector<float> w = testing::random_vec<float>(dim, 8, 0.5, 1.5);
    std::vector<float> y32(n * ld), rstd32(n), rstd16(n);
    std::vector<bf16> y16(n * ld, herd::to_bf16(7.0f));
    rmsnorm_forward<float>(x32.data(), ld, w.data(), n, dim, 1e-5, y32.data(), ld, rstd32.data());
    rmsnorm_forward(x16.data(), ld, w.data(), n, dim, 1e-5, y16.data(), ld, rstd16.data());
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(rstd16[i], rstd32[i]) << i;
      for (std::int64_t j = 0; j < dim; ++j) ASSERT_EQ(y16[i * ld + j].bits, float_to_bf16(y32[i * ld + j])) << i;
      for (std::int64_t j = dim; j < ld; ++j) ASSERT_EQ(herd::to_float(y16[i * ld + j]), 7.0f) << "padding written";
    }
    const std::vector<float> dy = testing::random_vec<float>(n * ld, 9);
    for (const Accumulate acc : {Accumulate::kOverwrite, Accumulate::kAdd}) {
      std::vector<float> dx32 = testing::random_vec<float>(n * ld, 10), dx16 = dx32;
      std::vector<float> dw32 = testing::random_vec<float>(dim, 11), dw16 = dw32;
      rmsnorm_backward<float>(dy.data(), ld, x32.data(), ld, w.data(), rstd32.data(), n, dim, dx32.data(), ld, acc,
                              dw32.data());
      rmsnorm_backward(dy.data(), ld, x16.data(), ld, w.data(), rstd32.data(), n, dim, dx16.data(), ld, acc,
                       dw16.data());
      EXPECT_EQ(dx16, dx32);
      EXPECT_EQ(dw16, dw32);
    }
  }
}

// bf16 mode's SwiGLU on the saved bf16 gate and up: the fp32 kernel's bits on the widened inputs,
// rounded as written (forward and both gradients), strided rows, and a size that runs threaded.
TEST(SwiGlu, Bf16StorageEqualsWideningAndRoundingAroundTheFp32KernelBitForBit) {
  for (const auto& [n, width] : std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 1}, {5, 17}, {100, 768}}) {
    SCOPED_TRACE(::testing::Message() << n << " x " << width);
    const std::int64_t ld = width + 5;
    const std::vector<float> gr = testing::random_vec<float>(n * ld, 20, -6, 6),
                             ur = testing::random_vec<float>(n * ld, 21);
    std::vector<bf16> g16(n * ld), u16(n * ld);
    std::vector<float> g32(n * ld), u32(n * ld);
    for (std::int64_t i = 0; i < n * ld; ++i) {
      g16[i] = herd::to_bf16(gr[i]), u16[i] = herd::to_bf16(ur[i]);
      g32[i] = herd::to_float(g16[i]), u32[i] = herd::to_float(u16[i]);
    }
    std::vector<float> o32(n * ld), dg32(n * ld), du32(n * ld);
    std::vector<bf16> o16(n * ld), dg16(n * ld), du16(n * ld);
    swiglu_forward<float>(g32.data(), ld, u32.data(), ld, n, width, o32.data(), ld);
    swiglu_forward(g16.data(), ld, u16.data(), ld, n, width, o16.data(), ld);
    const std::vector<float> dout = testing::random_vec<float>(n * ld, 22);
    swiglu_backward<float>(dout.data(), ld, g32.data(), ld, u32.data(), ld, n, width, dg32.data(), ld, du32.data(), ld);
    swiglu_backward(dout.data(), ld, g16.data(), ld, u16.data(), ld, n, width, dg16.data(), ld, du16.data(), ld);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < width; ++j) {
        const std::int64_t e = i * ld + j;
        ASSERT_EQ(o16[e].bits, float_to_bf16(o32[e])) << e;
        ASSERT_EQ(dg16[e].bits, float_to_bf16(dg32[e])) << e;
        ASSERT_EQ(du16[e].bits, float_to_bf16(du32[e])) << e;
      }
  }
}

TEST(SwiGlu, MatchesReference) {
  swiglu_case<float>(13, 77, 1e-5);
  swiglu_case<float>(64, 1536, 1e-5);
  swiglu_case<double>(13, 77, 1e-12);
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  const std::int64_t n = 4, width = 6;
  auto g = random_vec<double>(n * width, 11, -4, 4), u = random_vec<double>(n * width, 12);
  auto dout = random_vec<double>(n * width, 13);
  std::vector<double> out(n * width), dg(n * width), du(n * width);
  swiglu_backward<double>(dout.data(), width, g.data(), width, u.data(), width, n, width, dg.data(), width, du.data(),
                          width);
  auto loss = [&] {
    swiglu_forward<double>(g.data(), width, u.data(), width, n, width, out.data(), width);
    return testing::dot(out, dout);
  };
  EXPECT_LT(testing::fd_check(g, dg, loss), 1e-7);
  EXPECT_LT(testing::fd_check(u, du, loss), 1e-7);
}

}  // namespace
}  // namespace herd::kernels
