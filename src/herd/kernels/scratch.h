// The CPU kernels' per-thread scratch (the logits tile of the cross-entropy, attention's tiles): buffers
// each thread keeps and only grows, outside any arena, so a rank's memory is its arena and state plus
// what its thread holds here.
#pragma once

#include <cstdint>

namespace herd::kernels {

// Bytes the calling thread holds in kernel scratch buffers now. Other threads' (an OpenMP team's
// workers) are not counted.
std::int64_t this_thread_scratch_bytes();

}  // namespace herd::kernels
