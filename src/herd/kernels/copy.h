// Whole-buffer copies and zero fills split over the kernel threads. A single thread's memcpy of the
// activations of one micro-batch (8 MiB for the small model) or a memset of a gradient shard (130 MB)
// leaves the other threads of the team idle for a millisecond or more, and a thread that waits that
// long sleeps and costs the next region its wake-up (docs/kernels.md); split, the pass takes its share
// of the memory bandwidth on every core. Small buffers are done by the calling thread.
#pragma once

#include <cstddef>

namespace herd::kernels {

// dst (bytes) = src (bytes); the ranges do not overlap.
void copy_buffer(const void* src, void* dst, std::size_t bytes);
// dst (bytes) = 0.
void zero_buffer(void* dst, std::size_t bytes);

}  // namespace herd::kernels
