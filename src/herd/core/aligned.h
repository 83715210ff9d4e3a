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

inline void* aligned_bytes(std::size_t bytes) {
  std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

template <typename T>
AlignedPtr<T> aligned_array(std::size_t count) {
  return AlignedPtr<T>(static_cast<T*>(aligned_bytes(count * sizeof(T))));
}

}  // namespace herd
