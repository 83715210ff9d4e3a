#include "herd/kernels/rmsnorm.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "herd/kernels/cuda/kernels.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

using testing::all_close;
using testing::download;
using testing::random_vector;
using testing::upload;

struct Shape {
  std::int64_t n, dim, ldx, ldy;  // ldy is also the stride of dy and dx in the backward
};

// Dense and strided rows, dims below and above one block's width, n above the backward's 256 row
// groups (uneven groups) and a single row.
const Shape kShapes[] = {{7, 64, 64, 64}, {33, 1000, 1003, 1010}, {5, 4096, 4100, 4096},
                         {1, 17, 17, 20}, {300, 256, 256, 256},   {513, 33, 40, 35}};

// Buffers of n * ld elements whose padding holds a sentinel, so writes outside the rows show up.
std::vector<float> padded(std::int64_t n, std::int64_t dim, std::int64_t ld, std::uint32_t seed, float lo = -1.0f,
                          float hi = 1.0f) {
  std::vector<float> v = random_vector(n * ld, seed, lo, hi);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = dim; j < ld; ++j) v[i * ld + j] = 7.0f;
  }
  return v;
}

TEST(CudaRmsnorm, ForwardMatchesTheCpuKernel) {
  HERD_REQUIRE_GPU();
  std::uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << " dim " << s.dim << " ldx " << s.ldx << " ldy " << s.ldy);
    const std::vector<float> x = padded(s.n, s.dim, s.ldx, seed++, -2.0f, 2.0f);
    const std::vector<float> w = random_vector(s.dim, seed++, 0.5f, 1.5f);
    std::vector<float> y = padded(s.n, s.dim, s.ldy, seed++);
    std::vector<float> rstd(static_cast<std::size_t>(s.n), -1.0f);
    auto dx = upload(x);
    auto dw = upload(w);
    auto dy = upload(y);
    auto drstd = upload(rstd);
    kernels::rmsnorm_forward(x.data(), s.ldx, w.data(), s.n, s.dim, 1e-5, y.data(), s.ldy, rstd.data());
    rmsnorm_forward(dx.data(), s.ldx, dw.data(), s.n, s.dim, 1e-5, dy.data(), s.ldy, drstd.data());
    EXPECT_TRUE(all_close(download(drstd), rstd, 1e-6, 1e-5));
    EXPECT_TRUE(all_close(download(dy), y, 1e-6, 1e-5));
  }
}

TEST(CudaRmsnorm, BackwardMatchesTheCpuKernel) {
  HERD_REQUIRE_GPU();
  std::uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    for (const Accumulate acc : {Accumulate::kOverwrite, Accumulate::kAdd}) {
      SCOPED_TRACE(::testing::Message() << "n " << s.n << " dim " << s.dim << " ldx " << s.ldx << " ldy " << s.ldy
                                        << (acc == Accumulate::kAdd ? " add" : " overwrite"));
      const std::vector<float> x = padded(s.n, s.dim, s.ldx, seed++, -2.0f, 2.0f);
      const std::vector<float> w = random_vector(s.dim, seed++, 0.5f, 1.5f);
      const std::vector<float> g = padded(s.n, s.dim, s.ldy, seed++);
      std::vector<float> y(static_cast<std::size_t>(s.n * s.ldy)), rstd(static_cast<std::size_t>(s.n));
      kernels::rmsnorm_forward(x.data(), s.ldx, w.data(), s.n, s.dim, 1e-5, y.data(), s.ldy, rstd.data());
      std::vector<float> dx = padded(s.n, s.dim, s.ldy, seed++);  // kAdd adds into it
      std::vector<float> dw = random_vector(s.dim, seed++);       // dw always accumulates
      auto d_x = upload(x);
      auto d_w = upload(w);
      auto d_g = upload(g);
      auto d_rstd = upload(rstd);
      auto d_dx = upload(dx);
      auto d_dw = upload(dw);
      kernels::rmsnorm_backward(g.data(), s.ldy, x.data(), s.ldx, w.data(), rstd.data(), s.n, s.dim, dx.data(), s.ldy,
                                acc, dw.data());
      rmsnorm_backward(d_g.data(), s.ldy, d_x.data(), s.ldx, d_w.data(), d_rstd.data(), s.n, s.dim, d_dx.data(), s.ldy,
                       acc, d_dw.data());
      EXPECT_TRUE(all_close(download(d_dx), dx, 1e-5, 1e-5));
      EXPECT_TRUE(all_close(download(d_dw), dw, 1e-4, 1e-5));  // a sum over up to 513 rows
    }
  }
}

// dw is summed in an order fixed by n and dim alone: two runs give the same bits.
TEST(CudaRmsnorm, BackwardIsDeterministic) {
  HERD_REQUIRE_GPU();
  const std::int64_t n = 1000, dim = 512;
  const std::vector<float> x = random_vector(n * dim, 1), w = random_vector(dim, 2, 0.5f, 1.5f);
  const std::vector<float> g = random_vector(n * dim, 3), rstd = random_vector(n, 4, 0.5f, 2.0f);
  auto d_x = upload(x);
  auto d_w = upload(w);
  auto d_g = upload(g);
  auto d_rstd = upload(rstd);
  DeviceBuffer<float> d_dx(n * dim);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    auto d_dw = upload(std::vector<float>(dim, 0.0f));
    rmsnorm_backward(d_g.data(), dim, d_x.data(), dim, d_w.data(), d_rstd.data(), n, dim, d_dx.data(), dim,
                     Accumulate::kOverwrite, d_dw.data());
    runs.push_back(download(d_dw));
  }
  for (std::int64_t j = 0; j < dim; ++j) ASSERT_EQ(runs[0][j], runs[1][j]) << "column " << j;
}

// No rows: nothing is written, dw keeps its value.
TEST(CudaRmsnorm, NoRowsIsANoOp) {
  HERD_REQUIRE_GPU();
  const std::int64_t dim = 64;
  const std::vector<float> dw = random_vector(dim, 5);
  auto d_dw = upload(dw);
  auto d_buf = upload(random_vector(dim, 6));
  rmsnorm_forward(d_buf.data(), dim, d_buf.data(), 0, dim, 1e-5, d_buf.data(), dim, d_buf.data());
  rmsnorm_backward(d_buf.data(), dim, d_buf.data(), dim, d_buf.data(), d_buf.data(), 0, dim, d_buf.data(), dim,
                   Accumulate::kAdd, d_dw.data());
  EXPECT_EQ(download(d_dw), dw);
}

}  // namespace
}  // namespace herd::kernels::cuda
