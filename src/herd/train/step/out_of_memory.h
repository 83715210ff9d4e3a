// Running out of memory, reported as one line instead of an abort or the kernel's OOM killer.
//
// Before any rank starts, check_host_memory refuses a run whose planned memory (train/plan/projection.h, the
// same numbers as the "planned" line) is well beyond this host's physical memory: such a run (the 8B
// model on a 24 GiB machine) would otherwise allocate tensor by tensor until the kernel killed it.
// Should an allocation still fail, std::bad_alloc escaping a rank would end the process with exit
// 134; the launcher catches it at the rank boundary (train/job/job.cpp) and turns it into
// out_of_memory_error: the bytes the failed allocation asked for (known when it came from
// aligned_bytes, core/aligned.h, which is where the weights, gradients and activation arenas live),
// the planner's figure for the layout, the host's memory, and what to change.
#pragma once

#include <cstdint>
#include <new>

#include "herd/core/error.h"
#include "herd/model/config.h"
#include "herd/train/job/config.h"

namespace herd::train {

// Planned memory beyond this multiple of the host's physical memory is refused (the planner's figure
// is an estimate; within the margin the run is tried and may still fit).
inline constexpr double kHostMemoryMargin = 1.25;

// Error when the planner's memory for `ranks_on_host` ranks of this layout exceeds kHostMemoryMargin x
// this host's memory: "the planner estimates 120 GiB per rank for this layout (120 GiB for its 1 rank
// on this host), beyond this host's 23.5 GiB; lower parallel.microbatch_size ...". Ok when the layout
// cannot be projected (other checks report that) or the host's memory is unknown.
Status check_host_memory(const TrainConfig& cfg, const model::LlamaConfig& m, std::int64_t ranks_on_host);

// "out of memory: an allocation of 3.94 TiB (4335104032768 bytes) failed; the planner estimates
// 3.32 TiB per rank for this layout (3.32 TiB for its 1 rank) and this host has 23.5 GiB; lower
// parallel.microbatch_size or data.seq_len, add ranks (parallel.dp, tp, pp) or use a smaller model".
// The launcher prefixes the rank. The planner part is left out when the layout cannot be projected.
Error out_of_memory_error(const std::bad_alloc& e, const TrainConfig& cfg, const model::LlamaConfig& m);

}  // namespace herd::train
