#include "herd/kernels/convert.h"

#include <gtest/gtest.h>

#include "herd/kernels/cuda/kernels.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

using testing::download;
using testing::random_vector;
using testing::upload;

// Every bf16 conversion on the GPU gives the CPU kernel's bits (one rounding rule everywhere),
// including subnormals, ties, overflow to infinity.
TEST(CudaConvert, BitsMatchTheCpuKernel) {
  HERD_REQUIRE_GPU();
  std::vector<float> x = random_vector(100003, 7, -3.0f, 3.0f);
  x[0] = 1e-40f;             // subnormal
  x[1] = 3.3895314e38f;      // rounds to infinity
  x[2] = 1.0f + 1.0f / 256;  // a tie, to even
  x[3] = -0.0f;
  std::vector<bf16> want(x.size());
  kernels::to_bf16(x.data(), static_cast<std::int64_t>(x.size()), want.data());
  auto dx = upload(x);
  DeviceBuffer<bf16> dout(static_cast<std::int64_t>(x.size()));
  to_bf16(dx.data(), dx.size(), dout.data());
  const std::vector<bf16> got = download(dout);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i].bits, want[i].bits) << "element " << i << " = " << x[i];

  DeviceBuffer<float> back(dx.size());
  to_float(dout.data(), dout.size(), back.data());
  const std::vector<float> widened = download(back);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(widened[i], bf16_to_float(want[i].bits));

  round_to_bf16(dx.data(), dx.size(), nullptr);
  const std::vector<float> rounded = download(dx);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(rounded[i], bf16_to_float(want[i].bits));
}

}  // namespace
}  // namespace herd::kernels::cuda
