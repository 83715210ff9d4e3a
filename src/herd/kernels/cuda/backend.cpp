// Registers the CUDA backend with kernels/device.h when the binary loads (herd_kernels_cuda is linked
// whole into herd and the tests, so this object is always kept).
#include "herd/kernels/cuda/kernels.h"
#include "herd/kernels/cuda/runtime.h"
#include "herd/kernels/device.h"

namespace herd::kernels::cuda {
namespace {

class CudaBackend final : public DeviceBackend {
 public:
  Device device() const override { return Device::kCuda; }
  int device_count(std::string* why) const override { return cuda::device_count(why); }
  std::string describe(int index) const override { return describe_device(index); }
  void bind_thread(int index) const override { set_device(index); }
  DeviceRates measure_rates(const DeviceRateShapes& shapes) const override { return measure_device_rates(shapes); }
};

[[maybe_unused]] const bool registered = [] {
  static const CudaBackend backend;
  register_device_backend(&backend);
  return true;
}();

}  // namespace
}  // namespace herd::kernels::cuda
