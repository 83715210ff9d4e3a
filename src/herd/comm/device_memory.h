// Device memory as the communicators see it: which pointers live on a GPU, and the copies and ordered
// sums a backend makes on them.
//
// A rank that trains on a GPU hands the communicators device pointers (gradients, gathered weights,
// pipeline activations) and host pointers (loss sums, flags, step numbers) through the same calls.
// CommOptions::device_memory carries this interface when the run's device is not the CPU
// (parallel/device_memory.h makes it from the device's op interface, kernels/ops.h), and a backend asks
// it per op:
//   - `local` (ranks as threads sharing one GPU: the device-local communicator) moves and reduces
//     device buffers with the device's own copies and additions, in the same rank order as on the
//     host, so a layout on one GPU is bit-identical to the same layout's reductions on the CPU;
//   - `nccl` routes host buffers to its bootstrap communicator and orders its stream after the
//     rank's compute queue.
// Without it (CPU runs) every pointer is host memory.
#pragma once

#include <cstddef>

#include "herd/comm/types.h"

namespace herd::comm {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Whether `p` points into the device's memory.
  virtual bool holds(const void* p) const = 0;
  // dst <- src (bytes), either pointer host or device memory; enqueued on the calling thread's queue.
  virtual void copy(void* dst, const void* src, std::size_t bytes) const = 0;
  // dst[i] = ((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ... for `count` device elements of type t, the
  // order of comm/reduce.h; dst may alias one source. Enqueued on the calling thread's queue.
  virtual void reduce_ordered(DType t, ReduceOp op, const void* const* srcs, int n, void* dst,
                              std::size_t count) const = 0;
  // Device memory for a backend's temporary buffer, and its release (ordered on the calling thread's
  // queue: a buffer released after the ops that read it were enqueued is not reused before they ran).
  virtual void* allocate(std::size_t bytes) const = 0;
  virtual void deallocate(void* p) const = 0;
  // Waits for everything the calling thread enqueued on the device.
  virtual void synchronize() const = 0;
  // The calling thread's device queue (a cudaStream_t), null where there is none.
  virtual void* queue() const = 0;

  // Whether an op on these buffers moves device memory: either one is the device's (null is neither).
  bool holds_either(const void* send, const void* recv) const {
    return (send != nullptr && holds(send)) || (recv != nullptr && holds(recv));
  }
};

}  // namespace herd::comm
