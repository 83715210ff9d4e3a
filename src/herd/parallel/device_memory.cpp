// comm::DeviceMemory over a device's op interface.
#include "herd/parallel/device_memory.h"

#include "herd/core/check.h"

namespace herd::parallel {
namespace {

class OpsDeviceMemory final : public comm::DeviceMemory {
 public:
  explicit OpsDeviceMemory(const kernels::Ops& ops) : ops_(ops) {}

  bool holds(const void* p) const override { return ops_.holds(p); }

  void copy(void* dst, const void* src, std::size_t bytes) const override {
    if (bytes == 0 || dst == src) return;
    const bool to_device = holds(dst), from_device = holds(src);
    if (to_device && from_device) {
      ops_.copy(src, dst, bytes);
    } else if (to_device) {
      ops_.copy_from_host(src, dst, bytes);
    } else if (from_device) {
      ops_.copy_to_host(src, dst, bytes);
    } else {
      kernels::cpu_ops().copy(src, dst, bytes);  // both host memory
    }
  }

  // acc = srcs[0]; acc += srcs[j] for j = 1 .. n-1: the order of comm/reduce.h, each sum rounded once.
  // The accumulator is dst itself unless dst is a later source (an in-place all-reduce's chunk on any
  // rank but the first), which the sums must still read: then a private buffer, copied to dst after.
  void reduce_ordered(DType t, comm::ReduceOp op, const void* const* srcs, int n, void* dst,
                      std::size_t count) const override {
    HERD_CHECK(op == comm::ReduceOp::kSum && (t == DType::kF32 || t == DType::kF64), "device reduction of ",
               dtype_name(t), " by ", comm::reduce_name(op), ": only fp32 and fp64 sums run on a device");
    HERD_CHECK(n >= 1, "device reduction over ", n, " sources");
    if (count == 0) return;
    const std::size_t bytes = count * dtype_bytes(t);
    bool dst_is_later_source = false;
    for (int j = 1; j < n; ++j) dst_is_later_source = dst_is_later_source || srcs[j] == dst;
    void* acc = dst_is_later_source ? ops_.allocate(bytes) : dst;
    if (acc != srcs[0]) ops_.copy(srcs[0], acc, bytes);
    const auto len = static_cast<std::int64_t>(count);
    for (int j = 1; j < n; ++j) {
      if (t == DType::kF32) {
        ops_.add(static_cast<const float*>(srcs[j]), len, static_cast<float*>(acc));
      } else {
        ops_.add(static_cast<const double*>(srcs[j]), len, static_cast<double*>(acc));
      }
    }
    if (acc != dst) {
      ops_.copy(acc, dst, bytes);
      ops_.deallocate(acc);
    }
  }

  void* allocate(std::size_t bytes) const override { return ops_.allocate(bytes); }
  void deallocate(void* p) const override { ops_.deallocate(p); }
  void synchronize() const override { ops_.synchronize(); }
  void* queue() const override { return ops_.queue(); }

 private:
  const kernels::Ops& ops_;
};

}  // namespace

std::shared_ptr<const comm::DeviceMemory> make_device_memory(const kernels::Ops& ops) {
  return std::make_shared<OpsDeviceMemory>(ops);
}

}  // namespace herd::parallel
