// The golden PyTorch check through the trainer's model (golden_device.h): on the CPU, and on a stand-in
// device (tests/parallel/host_device_ops.h) that takes a GPU run's path and records any host pointer
// handed to a kernel. fp32 within 1e-5 of PyTorch's float64 reference, as golden_test.cpp.
#include "golden_device.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "parallel/host_device_ops.h"

namespace herd::testing {
namespace {

void expect_golden(kernels::Device device, const char* label) {
  for (model::Recompute r : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    SCOPED_TRACE(model::recompute_name(r));
    const Result<GoldenDeviceErrors> e = golden_rank_model(device, r);
    ASSERT_TRUE(e.ok()) << e.error().message();
    std::printf("%s, %s: loss %.2e, worst gradient %.2e (%s) from PyTorch's float64\n", label, model::recompute_name(r),
                e->loss, e->worst_grad, e->worst_grad_name.c_str());
    EXPECT_LE(e->loss, 1e-5);
    EXPECT_LE(e->worst_grad, 1e-5) << "gradient of " << e->worst_grad_name;
  }
}

TEST(GoldenDevice, TheRankModelOnTheCpuMatchesPyTorch) { expect_golden(kernels::Device::kCpu, "cpu"); }

TEST(GoldenDevice, TheRankModelOnADeviceMatchesPyTorch) {
  kernels::testing::HostDeviceOps device;
  {
    kernels::testing::DeviceRegistration registered(&device);
    expect_golden(kernels::Device::kCuda, "stand-in device");
  }
  EXPECT_EQ(device.violations(), std::vector<std::string>{});
}

}  // namespace
}  // namespace herd::testing
