// What one rank holds, as the trainers report it for "planned vs measured" (train/plan/projection.h):
// the parameter, gradient and optimizer bytes of its allocations, the high-water mark of its
// activation arena and the kernel scratch its thread holds. A struct of its own so RankModel can
// report it without the planner's headers.
#pragma once

namespace herd::train {

struct RankMemoryUse {
  double state_bytes = 0;       // parameters, gradients, optimizer moments (allocated sizes)
  double arena_peak_bytes = 0;  // the activation arena's high-water mark
  // The saved activations alone at their peak, where the model measures them apart from the arena's
  // temporaries (the pipeline executor's slots); -1 where it does not.
  double saved_activation_bytes = -1;
  // The rank thread's kernel scratch at the end of the run (kernels/scratch.h): the cross-entropy's
  // logits tile and attention's tiles, held outside the arena.
  double kernel_scratch_bytes = 0;
  double total() const { return state_bytes + arena_peak_bytes + kernel_scratch_bytes; }
  double activation_bytes() const { return arena_peak_bytes + kernel_scratch_bytes; }
};

}  // namespace herd::train
