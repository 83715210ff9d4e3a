// Parallel copies and zero fills (kernels/copy.h).
#include "herd/kernels/copy.h"

#include <cstdint>
#include <cstring>

namespace herd::kernels {
namespace {

// Below two of these a team costs more than it saves; above, chunks of this size (cache-line aligned
// boundaries: the chunk size is a multiple of 64) go to the threads in order.
constexpr std::size_t kChunk = std::size_t{1} << 18;

// fn(offset, length) over [0, bytes): once on the calling thread for a small buffer, else per chunk
// over the team.
template <typename Fn>
void over_chunks(std::size_t bytes, Fn fn) {
  if (bytes < 2 * kChunk) {
    if (bytes > 0) fn(std::size_t{0}, bytes);
    return;
  }
  const std::int64_t chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t at = static_cast<std::size_t>(c) * kChunk;
    fn(at, bytes - at < kChunk ? bytes - at : kChunk);
  }
}

}  // namespace

void copy_buffer(const void* src, void* dst, std::size_t bytes) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  over_chunks(bytes, [&](std::size_t at, std::size_t n) { std::memcpy(d + at, s + at, n); });
}

void zero_buffer(void* dst, std::size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  over_chunks(bytes, [&](std::size_t at, std::size_t n) { std::memset(d + at, 0, n); });
}

}  // namespace herd::kernels
