// Where a run's kernels execute (`train.device`, `--device cpu|cuda`) and which device backends this
// binary carries.
//
// The CPU backend is always there. A device backend (kernels/cuda/, compiled when CMake finds nvcc)
// registers itself when the binary loads, so no code outside its folder needs an #ifdef: asking for a
// device this build lacks, or one the machine lacks, is a one-line user error naming the field, the
// value and the fix (check_device), raised before anything is allocated.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "herd/core/error.h"

namespace herd::kernels {

enum class Device { kCpu, kCuda };

std::string_view device_name(Device d);                     // "cpu", "cuda"
std::optional<Device> parse_device(std::string_view name);  // nullopt for anything else

// What a device backend tells the runtime about itself.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Device device() const = 0;
  // Usable devices on this machine; 0 with `why` set to what the driver reported.
  virtual int device_count(std::string* why) const = 0;
  // One line per device: name, compute capability, memory, driver and runtime versions.
  virtual std::string describe(int index) const = 0;
};

// Called once per backend at load time (kernels/cuda/backend.cpp); a second registration of the same
// device replaces the first.
void register_device_backend(const DeviceBackend* backend);
// The backend for `d`, or null when this binary was built without it (always null for kCpu).
const DeviceBackend* device_backend(Device d);

// Checks that this run can use `d`: Ok for the CPU; for a device, that the backend was built in and a
// device is visible. `field` is the setting the value came from ("train.device"), for the message.
Status check_device(Device d, std::string_view field);

}  // namespace herd::kernels
