// The device runtime of kernels/cuda/runtime.h: device selection, per-thread compute streams, events,
// the caching allocator and copies.
#include <cuda_runtime.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "herd/core/aligned.h"
#include "herd/kernels/cuda/common.cuh"
#include "herd/kernels/cuda/runtime.h"

namespace herd::kernels::cuda {

void throw_cuda_error(const char* call, cudaError_t err, const char* file, int line) {
  throw_cuda_error_message(call, std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err), file, line);
}

void throw_cuda_error_message(const char* call, const std::string& message, const char* file, int line) {
  std::ostringstream os;
  os << "CUDA call " << call << " failed (" << message << ") at " << file << ":" << line;
  throw CudaError(os.str());
}

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later calls are not poisoned
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount: no CUDA device is visible";
  return n;
}

std::string describe_device(int device) {
  cudaDeviceProp p{};
  HERD_CUDA(cudaGetDeviceProperties(&p, device));
  int driver = 0, runtime = 0;
  HERD_CUDA(cudaDriverGetVersion(&driver));
  HERD_CUDA(cudaRuntimeGetVersion(&runtime));
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << p.name << " (sm_" << p.major << p.minor << ", " << p.multiProcessorCount << " SMs, "
     << static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0) << " GiB), driver " << driver / 1000 << "."
     << (driver % 1000) / 10 << ", runtime " << runtime / 1000 << "." << (runtime % 1000) / 10;
  return os.str();
}

namespace {

struct ThreadState {
  int device = -1;
  cudaStream_t stream = nullptr;
  ~ThreadState() {
    if (stream) cudaStreamDestroy(stream);  // no throw from a thread's exit
  }
};
thread_local ThreadState t_state;

ThreadState& bound() {
  if (t_state.device < 0) set_device(0);
  return t_state;
}

}  // namespace

void set_device(int device) {
  HERD_CUDA(cudaSetDevice(device));
  if (t_state.device != device) {
    if (t_state.stream) HERD_CUDA(cudaStreamDestroy(t_state.stream));
    t_state.stream = nullptr;
    t_state.device = device;
  }
  if (!t_state.stream) HERD_CUDA(cudaStreamCreateWithFlags(&t_state.stream, cudaStreamNonBlocking));
}

int current_device() { return bound().device; }

void* compute_stream() { return bound().stream; }

void synchronize() { HERD_CUDA(cudaStreamSynchronize(bound().stream)); }

Event::Event() {
  cudaEvent_t e = nullptr;
  HERD_CUDA(cudaEventCreate(&e));
  event_ = e;
}
Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}
void Event::record(void* s) {
  HERD_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(s)));
}
void Event::wait(void* s) const {
  HERD_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(s), static_cast<cudaEvent_t>(event_), 0));
}
void Event::synchronize() const { HERD_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(event_))); }
float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0;
  HERD_CUDA(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_), static_cast<cudaEvent_t>(stop.event_)));
  return ms;
}

// --- The caching allocator.

std::size_t allocation_size(std::size_t bytes) {
  constexpr std::size_t kSmall = 512, kLarge = 2u << 20, kSmallLimit = 1u << 20;
  if (bytes == 0) bytes = 1;
  if (bytes <= kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

namespace {

struct Block {
  std::size_t size = 0;
  int device = 0;
  cudaStream_t stream = nullptr;
};

class CachingAllocator {
 public:
  void* allocate(std::size_t bytes) {
    const std::size_t size = allocation_size(bytes);
    ThreadState& t = bound();
    std::lock_guard<std::mutex> lock(mu_);
    // Best fit among cached blocks of this device and stream, no more than twice the request (so a
    // small request never pins a huge block).
    auto& bins = free_[{t.device, t.stream}];
    auto it = bins.lower_bound(size);
    if (it != bins.end() && it->first <= 2 * size) {
      void* p = it->second;
      const Block& b = live_[p] = Block{it->first, t.device, t.stream};  // the bin key is the block's size
      bins.erase(it);
      stats_.allocated += b.size;
      stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
      ++stats_.cache_hits;
      return p;
    }
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_locked();  // return the cache to the driver and try once more
      err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw AllocationFailed(size);
    }
    live_[p] = Block{size, t.device, t.stream};
    stats_.allocated += size;
    stats_.reserved += size;
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    ++stats_.cuda_mallocs;
    return p;
  }

  void free(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) throw CudaError("device_free: pointer was not allocated by herd's device allocator");
    const Block b = it->second;
    live_.erase(it);
    stats_.allocated -= b.size;
    free_[{b.device, b.stream}].emplace(b.size, p);
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_allocated = stats_.allocated;
    stats_.peak_reserved = stats_.reserved;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked();
  }

 private:
  void release_locked() {
    for (auto& [key, bins] : free_) {
      for (auto& [size, p] : bins) {
        cudaFree(p);
        stats_.reserved -= size;
      }
      bins.clear();
    }
  }

  std::mutex mu_;
  std::map<std::pair<int, cudaStream_t>, std::multimap<std::size_t, void*>> free_;
  std::unordered_map<void*, Block> live_;
  AllocatorStats stats_;
};

CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();  // never destroyed: frees may come at exit
  return *a;
}

}  // namespace

void* device_alloc(std::size_t bytes) { return allocator().allocate(bytes); }
void device_free(void* p) { allocator().free(p); }
AllocatorStats allocator_stats() { return allocator().stats(); }
void reset_peak_stats() { allocator().reset_peak(); }
void release_cached() { allocator().release(); }

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  HERD_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
  HERD_CUDA(cudaStreamSynchronize(stream()));
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  HERD_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  HERD_CUDA(cudaStreamSynchronize(stream()));
}
void copy_device(void* dst, const void* src, std::size_t bytes) {
  HERD_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
}
void fill_zero(void* dst, std::size_t bytes) { HERD_CUDA(cudaMemsetAsync(dst, 0, bytes, stream())); }

}  // namespace herd::kernels::cuda
