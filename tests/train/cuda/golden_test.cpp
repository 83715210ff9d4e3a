// The golden PyTorch check (golden_device.h) on a GPU: the one-rank trainer model on the CUDA op
// interface against PyTorch's float64 reference, fp32 within 1e-5 as on the CPU. Skipped, saying why,
// when no GPU is visible; scripts/device_check.sh runs it on a GPU machine.
#include <gtest/gtest.h>

#include "herd/kernels/device.h"
#include "train/golden_device.h"

namespace herd::testing {
namespace {

TEST(GoldenCuda, TheRankModelOnTheGpuMatchesPyTorch) {
  const kernels::DeviceBackend* cuda = kernels::device_backend(kernels::Device::kCuda);
  std::string why = "herd was built without the CUDA backend";
  if (cuda == nullptr || cuda->device_count(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
  for (model::Recompute r : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    SCOPED_TRACE(model::recompute_name(r));
    const Result<GoldenDeviceErrors> e = golden_rank_model(kernels::Device::kCuda, r);
    ASSERT_TRUE(e.ok()) << e.error().message();
    EXPECT_LE(e->loss, 1e-5);
    EXPECT_LE(e->worst_grad, 1e-5) << "gradient of " << e->worst_grad_name;
  }
}

}  // namespace
}  // namespace herd::testing
