#include "herd/kernels/scratch.h"

#include "herd/kernels/cpu/common.h"

namespace herd::kernels {

std::int64_t this_thread_scratch_bytes() { return cpu::thread_scratch_held; }

}  // namespace herd::kernels
