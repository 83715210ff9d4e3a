#include "herd/kernels/device.h"

#include <gtest/gtest.h>

namespace herd::kernels {
namespace {

TEST(Device, NamesRoundTrip) {
  EXPECT_EQ(parse_device("cpu"), Device::kCpu);
  EXPECT_EQ(parse_device("cuda"), Device::kCuda);
  EXPECT_EQ(parse_device("CUDA"), std::nullopt);
  EXPECT_EQ(parse_device(""), std::nullopt);
  EXPECT_EQ(device_name(Device::kCuda), "cuda");
  EXPECT_TRUE(check_device(Device::kCpu, "train.device").ok());
}

// herd_kernels_tests does not link the CUDA backend, so here cuda is always "not built": the error names
// the field, the value and both fixes.
TEST(Device, MissingBackendIsOneLineNamingTheFix) {
  ASSERT_EQ(device_backend(Device::kCuda), nullptr);
  const Status s = check_device(Device::kCuda, "train.device");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(),
            "train.device: 'cuda' needs a herd built with the CUDA toolkit (nvcc was not found when it was "
            "configured); use train.device=cpu, or install the toolkit and rebuild (docs/gpu.md)");
}

class FakeBackend final : public DeviceBackend {
 public:
  explicit FakeBackend(int n) : n_(n) {}
  Device device() const override { return Device::kCuda; }
  int device_count(std::string* why) const override {
    if (n_ == 0 && why) *why = "cudaGetDeviceCount: no CUDA-capable device is detected";
    return n_;
  }
  std::string describe(int) const override { return "Fake GPU"; }
  void bind_thread(int) const override {}
  DeviceRates measure_rates(const DeviceRateShapes&) const override { return {}; }

 private:
  int n_;
};

TEST(Device, RegisteredBackendWithoutDevices) {
  static const FakeBackend none(0), one(1);
  register_device_backend(&none);
  const Status s = check_device(Device::kCuda, "train.device");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(),
            "train.device: 'cuda' but no GPU is visible (cudaGetDeviceCount: no CUDA-capable device is detected); "
            "use train.device=cpu, or run on a machine with an NVIDIA GPU and its driver");
  register_device_backend(&one);
  EXPECT_TRUE(check_device(Device::kCuda, "train.device").ok());
  register_device_backend(nullptr);  // ignored
  EXPECT_EQ(device_backend(Device::kCuda), &one);
}

}  // namespace
}  // namespace herd::kernels
