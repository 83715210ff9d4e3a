// The registry of device backends (kernels/device.h).
#include "herd/kernels/device.h"

#include <array>

namespace herd::kernels {
namespace {

std::array<const DeviceBackend*, 2>& registry() {
  static std::array<const DeviceBackend*, 2> r{};
  return r;
}

}  // namespace

std::string_view device_name(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

std::optional<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return std::nullopt;
}

void register_device_backend(const DeviceBackend* backend) {
  if (backend != nullptr) registry()[static_cast<std::size_t>(backend->device())] = backend;
}

const DeviceBackend* device_backend(Device d) {
  return d == Device::kCpu ? nullptr : registry()[static_cast<std::size_t>(d)];
}

Status check_device(Device d, std::string_view field) {
  if (d == Device::kCpu) return Status::Ok();
  const DeviceBackend* b = device_backend(d);
  if (b == nullptr) {
    return make_error(field, ": '", device_name(d),
                      "' needs a herd built with the CUDA toolkit (nvcc was not found when it was configured); "
                      "use ",
                      field, "=cpu, or install the toolkit and rebuild (docs/gpu.md)");
  }
  std::string why;
  if (b->device_count(&why) == 0) {
    return make_error(field, ": '", device_name(d), "' but no GPU is visible (", why, "); use ", field,
                      "=cpu, or run on a machine with an NVIDIA GPU and its driver");
  }
  return Status::Ok();
}

}  // namespace herd::kernels
