// Aligned heap allocation for kernel buffers (64 bytes: one cache line, one AVX-512 register).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace herd {

inline constexpr std::size_t kAlignment = 64;

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
using AlignedPtr = std::unique_ptr<T[], AlignedFree>;

// What aligned_bytes throws when the system refuses: a std::bad_alloc that keeps the size asked for, so
// the out-of-memory report (train/step/out_of_memory.h) can say how much one allocation wanted.
class AllocationFailed : public std::bad_alloc {
 public:
  explicit AllocationFailed(std::size_t bytes) : bytes_(bytes) {}
  std::size_t bytes() const { return bytes_; }
  const char* what() const noexcept override { return "herd::AllocationFailed"; }

 private:
  std::size_t bytes_;
};

inline void* aligned_bytes(std::size_t bytes) {
  if (bytes > (std::size_t{1} << 62)) throw AllocationFailed(bytes);  // the rounding below would wrap
  std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p) throw AllocationFailed(rounded);
  return p;
}

template <typename T>
AlignedPtr<T> aligned_array(std::size_t count) {
  if (count > (std::size_t{1} << 62) / sizeof(T)) {  // count x sizeof(T) could wrap: report it saturated
    const std::size_t most = static_cast<std::size_t>(-1);
    throw AllocationFailed(count > most / sizeof(T) ? most : count * sizeof(T));
  }
  return AlignedPtr<T>(static_cast<T*>(aligned_bytes(count * sizeof(T))));
}

// std::allocator with kAlignment: a std::vector whose data starts on a cache line, as the arena's tensors
// do. What measures kernels (herd calibrate, bench/) holds its operands in one: AMX tile loads of rows
// that straddle two cache lines run oneDNN's bf16 matmul 8-25% slower (a 16-byte offset, which large
// std::vector buffers get from glibc, measured on a Sapphire Rapids core: docs/precision.md), so a
// rate taken on a plain std::vector understates what the training step's GEMMs reach.
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t count) { return static_cast<T*>(aligned_bytes(count * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace herd
