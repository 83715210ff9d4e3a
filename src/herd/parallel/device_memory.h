// The communicators' view of a rank's device memory (comm/device_memory.h), made from the device's op
// interface (kernels/ops.h): its pointer test, copies, additions in rank order and allocator.
#pragma once

#include <memory>

#include "herd/comm/device_memory.h"
#include "herd/kernels/ops.h"

namespace herd::parallel {

// Device memory through `ops` (which must outlive the result). A run on the CPU passes none to its
// communicators; the CPU's interface is accepted too, so the tests drive a backend's device path on
// host memory. Sums of fp32 and fp64 only: herd reduces nothing else on a device (max and min reduce
// host flags), and another reduction there is a check failure.
std::shared_ptr<const comm::DeviceMemory> make_device_memory(const kernels::Ops& ops);

}  // namespace herd::parallel
