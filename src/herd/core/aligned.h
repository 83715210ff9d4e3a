// Aligned heap allocation for kernel buffers (64 bytes: one cache line, one AVX-512 register).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace herd {

inline constexpr std::size_t kAlignment = 64;

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
using AlignedPtr = std::unique_ptr<T[], AlignedFree>;

// What aligned_bytes throws when the system refuses: a std::bad_alloc that keeps the size asked for, so
// the out-of-memory report (train/out_of_memory.h) can say how much one allocation wanted.
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

}  // namespace herd
