// Parallel copies and zero fills (kernels/copy.h).
#include "herd/kernels/copy.h"

#include <cstdint>
#include <cstring>

namespace herd::kernels {
namespace {

// Below this a team costs more than it saves; above it, chunks of this size (cache-line aligned
// boundaries: the chunk size is a multiple of 64) go to the threads in order.
constexpr std::size_t kChunk = std::size_t{1} << 18;

}  // namespace

void copy_buffer(const void* src, void* dst, std::size_t bytes) {
  if (bytes < 2 * kChunk) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  const std::int64_t chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t at = static_cast<std::size_t>(c) * kChunk;
    std::memcpy(d + at, s + at, bytes - at < kChunk ? bytes - at : kChunk);
  }
}

void zero_buffer(void* dst, std::size_t bytes) {
  if (bytes < 2 * kChunk) {
    if (bytes > 0) std::memset(dst, 0, bytes);
    return;
  }
  auto* d = static_cast<unsigned char*>(dst);
  const std::int64_t chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t at = static_cast<std::size_t>(c) * kChunk;
    std::memset(d + at, 0, bytes - at < kChunk ? bytes - at : kChunk);
  }
}

}  // namespace herd::kernels
