// Where a run's kernels execute (`train.device`, `--device cpu|cuda`) and which device backends this
// binary carries.
//
// The CPU backend is always there. A device backend (kernels/cuda/, compiled when CMake finds nvcc)
// registers itself when the binary loads, so no code outside its folder needs an #ifdef: asking for a
// device this build lacks, or one the machine lacks, is a one-line user error naming the field, the
// value and the fix (check_device), raised before anything is allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "herd/core/error.h"

namespace herd::kernels {

enum class Device { kCpu, kCuda };

std::string_view device_name(Device d);                     // "cpu", "cuda"
std::optional<Device> parse_device(std::string_view name);  // nullopt for anything else

// The shapes a device calibration times (`herd calibrate --device cuda`, cli/calibrate_device.cpp): one
// micro-batch of `rows` tokens (sequences of `seq_len`) through one transformer block's kernels, bf16
// as train.precision = bf16 runs them, and the loss head's GEMMs.
struct DeviceRateShapes {
  std::int64_t rows = 0, seq_len = 0;  // rows / seq_len sequences
  std::int64_t hidden = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  int repeats = 5;  // timed calls per kernel; the median counts
};

// What the device's kernels took on those shapes (medians, seconds per call), with the work each did.
struct DeviceRates {
  std::string device;       // describe(): name, compute capability, memory, driver
  double block_gemm_s = 0;  // the block's linears: forward, input gradient and weight gradient
  double block_gemm_flops = 0;
  double head_gemm_s = 0;  // the loss head's three GEMMs (logits, hidden gradient, weight gradient)
  double head_gemm_flops = 0;
  double attention_fwd_s = 0;  // causal flash attention, bf16 inputs
  double attention_bwd_s = 0;
  double stream_s = 0;         // RMSNorm forward + backward, fp32: the elementwise kernels' streaming rate
  double stream_bytes = 0;     // what that moved (read + written)
  double launch_s = 0;         // one launch of a tiny kernel in a stream of them: the per-kernel gap
  double optimizer_s = 0;      // one multi-tensor AdamW step over 64 Mi fp32 parameters and their bf16 re-copy
  double optimizer_bytes = 0;  // what that moved: 30 bytes a parameter (p, g, m, v read; p, m, v, bf16 p written)
};

// What a device backend tells the runtime about itself.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Device device() const = 0;
  // Usable devices on this machine; 0 with `why` set to what the driver reported.
  virtual int device_count(std::string* why) const = 0;
  // One line per device: name, compute capability, memory, driver and runtime versions.
  virtual std::string describe(int index) const = 0;
  // Binds the calling thread to device `index` (0 .. device_count() - 1): its kernels, allocations and
  // queue are that device's from then on. A thread that never calls it uses device 0.
  virtual void bind_thread(int index) const = 0;
  // Times this backend's kernels on device 0 at `shapes` (bf16). Throws the backend's error on a device fault.
  virtual DeviceRates measure_rates(const DeviceRateShapes& shapes) const = 0;
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
