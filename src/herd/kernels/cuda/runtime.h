// The CUDA device runtime of the `cuda` backend: which GPU a thread uses, its streams and events, the
// caching device allocator, and host <-> device copies. Plain C++ (no CUDA types leak out), so tests
// and the rest of kernels/cuda/ include it from .cpp files; compiled only when CMake finds nvcc
// (cmake/HerdExternal.cmake builds herd_kernels_cuda).
//
// Streams: every kernel of kernels/cuda/ is enqueued on the calling thread's compute stream
// (`compute_stream()`); communication (comm/nccl) runs on its own stream, and the two are ordered by
// events (`Event::record` on one, `Event::wait` on the other), as Megatron and torchtitan do. A kernel
// entry point returns once its work is enqueued; `synchronize()` waits for the thread's compute stream.
// Errors: a failed CUDA call is a device fault or a herd bug, not a user error: it throws
// CudaError naming the call, the CUDA error string and the source line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace herd::kernels::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Number of visible CUDA devices; 0 with `why` set ("cudaGetDeviceCount: no CUDA-capable device is
// detected") when there is none or no driver.
int device_count(std::string* why = nullptr);
// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB), driver 12.8, runtime 13.0": for logs and benchmark records.
std::string describe_device(int device);
// Binds the calling thread to `device` (cudaSetDevice) and creates its compute stream on first use.
void set_device(int device);
int current_device();

// The calling thread's compute stream, as an opaque cudaStream_t.
void* compute_stream();
// Waits until every kernel enqueued by this thread on its compute stream has finished.
void synchronize();

// An event recorded on one stream and waited on by another (ordering compute and communication).
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(void* stream);      // cudaEventRecord
  void wait(void* stream) const;  // cudaStreamWaitEvent: `stream` waits for the recorded work
  void synchronize() const;       // the host waits
  // Milliseconds between two recorded events (both must have completed).
  static float elapsed_ms(const Event& start, const Event& stop);

 private:
  void* event_ = nullptr;
};

// The caching device allocator (one per process, thread-safe). Blocks are rounded up to 512 bytes
// (below 1 MiB) or to 2 MiB and kept, once freed, in size-binned free lists for reuse, so a training
// step's allocations after the first step never reach cudaMalloc (whose implicit device
// synchronisation would stall the streams). A block freed on one stream is reused on the same stream
// only (no cross-stream event bookkeeping needed). Statistics feed the memory report.
struct AllocatorStats {
  std::size_t allocated = 0;       // bytes handed out now (rounded)
  std::size_t peak_allocated = 0;  // most ever handed out at once
  std::size_t reserved = 0;        // bytes obtained from cudaMalloc and not released
  std::size_t peak_reserved = 0;
  std::int64_t cuda_mallocs = 0;  // calls that reached cudaMalloc
  std::int64_t cache_hits = 0;    // allocations served from the cache
};
void* device_alloc(std::size_t bytes);  // throws herd::AllocationFailed (core/aligned.h) when the GPU is full
void device_free(void* p);
AllocatorStats allocator_stats();
void reset_peak_stats();
// Returns every cached (free) block to the driver: what an out-of-memory retry does first.
void release_cached();
// The caching rule, exposed for the host-side tests: the rounded size of a request.
std::size_t allocation_size(std::size_t bytes);

// Copies on the compute stream. The host-to-device and device-to-host copies are synchronous for the
// host (they return when the bytes have arrived), so a host buffer may be reused right after.
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
void copy_device(void* dst, const void* src, std::size_t bytes);  // asynchronous, on the stream
void fill_zero(void* dst, std::size_t bytes);                     // asynchronous, on the stream

// A device buffer of `count` elements of T, freed into the caching allocator.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::int64_t count)
      : ptr_(static_cast<T*>(device_alloc(static_cast<std::size_t>(count) * sizeof(T)))), count_(count) {}
  ~DeviceBuffer() {
    if (ptr_) device_free(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) {
    o.ptr_ = nullptr;
    o.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) device_free(ptr_);
      ptr_ = o.ptr_;
      count_ = o.count_;
      o.ptr_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* data() const { return ptr_; }
  std::int64_t size() const { return count_; }
  std::size_t bytes() const { return static_cast<std::size_t>(count_) * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  std::int64_t count_ = 0;
};

}  // namespace herd::kernels::cuda
