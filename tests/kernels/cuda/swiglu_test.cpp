#include "herd/kernels/swiglu.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "herd/core/bf16.h"
#include "herd/kernels/cuda/kernels.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

using testing::all_close;
using testing::download;
using testing::random_vector;
using testing::to_bf16_host;
using testing::upload;

// Equal values, or neighbours of the same sign: the GPU's expf and the CPU's fast_exp (and FMA
// contraction) may differ in the last fp32 bit, which moves a rounding to bf16 by one step at most.
::testing::AssertionResult within_one_ulp(const std::vector<bf16>& got, const std::vector<bf16>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  int misses = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const int g = got[i].bits, w = want[i].bits;
    if (g == w || bf16_to_float(got[i].bits) == bf16_to_float(want[i].bits)) continue;
    if ((g & 0x8000) == (w & 0x8000) && std::abs(g - w) <= 1) continue;
    if (misses++ < 5) first += " [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(w);
  }
  if (misses) return ::testing::AssertionFailure() << misses << " of " << got.size() << " beyond 1 ulp:" << first;
  return ::testing::AssertionSuccess();
}

struct Shape {
  std::int64_t n, width, pad;  // gate and up side by side in one (n, 2 * width + pad) buffer
};

const Shape kShapes[] = {{19, 300, 5}, {1, 7, 0}, {64, 1024, 0}, {3, 14336, 17}};

TEST(CudaSwiglu, FloatMatchesTheCpuKernel) {
  HERD_REQUIRE_GPU();
  std::uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << " width " << s.width << " pad " << s.pad);
    const std::int64_t ld = 2 * s.width + s.pad, ldo = s.width + s.pad;
    const std::vector<float> gu = random_vector(s.n * ld, seed++, -8.0f, 8.0f);
    const float* gate = gu.data();
    const float* up = gu.data() + s.width;
    auto d_gu = upload(gu);
    std::vector<float> out = random_vector(s.n * ldo, seed++);
    auto d_out = upload(out);
    kernels::swiglu_forward(gate, ld, up, ld, s.n, s.width, out.data(), ldo);
    swiglu_forward(d_gu.data(), ld, d_gu.data() + s.width, ld, s.n, s.width, d_out.data(), ldo);
    EXPECT_TRUE(all_close(download(d_out), out, 1e-6, 1e-5));

    const std::vector<float> dout = random_vector(s.n * ldo, seed++);
    std::vector<float> dgate = random_vector(s.n * ldo, seed++), dup = random_vector(s.n * ld, seed++);
    auto d_dout = upload(dout);
    auto d_dgate = upload(dgate);
    auto d_dup = upload(dup);
    kernels::swiglu_backward(dout.data(), ldo, gate, ld, up, ld, s.n, s.width, dgate.data(), ldo, dup.data(), ld);
    swiglu_backward(d_dout.data(), ldo, d_gu.data(), ld, d_gu.data() + s.width, ld, s.n, s.width, d_dgate.data(), ldo,
                    d_dup.data(), ld);
    EXPECT_TRUE(all_close(download(d_dgate), dgate, 1e-6, 1e-5));
    EXPECT_TRUE(all_close(download(d_dup), dup, 1e-6, 1e-5));
  }
}

TEST(CudaSwiglu, Bf16MatchesTheCpuKernelToOneUlp) {
  HERD_REQUIRE_GPU();
  std::uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "n " << s.n << " width " << s.width << " pad " << s.pad);
    const std::int64_t ld = 2 * s.width + s.pad, ldo = s.width + s.pad;
    const std::vector<bf16> gu = to_bf16_host(random_vector(s.n * ld, seed++, -8.0f, 8.0f));
    const bf16* gate = gu.data();
    const bf16* up = gu.data() + s.width;
    auto d_gu = upload(gu);
    std::vector<bf16> out = to_bf16_host(random_vector(s.n * ldo, seed++));
    auto d_out = upload(out);
    kernels::swiglu_forward(gate, ld, up, ld, s.n, s.width, out.data(), ldo);
    swiglu_forward(d_gu.data(), ld, d_gu.data() + s.width, ld, s.n, s.width, d_out.data(), ldo);
    EXPECT_TRUE(within_one_ulp(download(d_out), out));

    const std::vector<float> dout = random_vector(s.n * ldo, seed++);
    std::vector<bf16> dgate = to_bf16_host(random_vector(s.n * ldo, seed++));
    std::vector<bf16> dup = to_bf16_host(random_vector(s.n * ld, seed++));
    auto d_dout = upload(dout);
    auto d_dgate = upload(dgate);
    auto d_dup = upload(dup);
    kernels::swiglu_backward(dout.data(), ldo, gate, ld, up, ld, s.n, s.width, dgate.data(), ldo, dup.data(), ld);
    swiglu_backward(d_dout.data(), ldo, d_gu.data(), ld, d_gu.data() + s.width, ld, s.n, s.width, d_dgate.data(), ldo,
                    d_dup.data(), ld);
    EXPECT_TRUE(within_one_ulp(download(d_dgate), dgate));
    EXPECT_TRUE(within_one_ulp(download(d_dup), dup));
  }
}

// n = 0 or width = 0 writes nothing.
TEST(CudaSwiglu, EmptyIsANoOp) {
  HERD_REQUIRE_GPU();
  const std::vector<float> buf = random_vector(64, 3);
  auto d = upload(buf);
  swiglu_forward(d.data(), 8, d.data(), 8, 0, 8, d.data(), 8);
  swiglu_forward(d.data(), 8, d.data(), 8, 8, 0, d.data(), 8);
  swiglu_backward(d.data(), 8, d.data(), 8, d.data(), 8, 0, 8, d.data(), 8, d.data(), 8);
  EXPECT_EQ(download(d), buf);
}

}  // namespace
}  // namespace herd::kernels::cuda
