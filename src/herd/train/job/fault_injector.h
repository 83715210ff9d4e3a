// FaultInjector: the fault.* section of a config (for tests and drills) as the trainer's step hooks
// (train/step/step_hooks.h): a rank killed or hung at a step (fault.kill_rank / kill_step, kill_every,
// hang_rank / hang_step), a corrupted checkpoint shard before a kill (fault.corrupt_checkpoint), a NaN
// in a gradient (fault.nan_rank / nan_step), a slowed rank (fault.slow_*), a failing save
// (fault.fail_checkpoint_step), a rank lost for good (fault.lose_rank / lose_step: it reports
// "rank R is lost for good", which an elastic supervisor reads). Each one-shot fault is recorded in the checkpoint
// directory's fault log (fault_log.h) so that a restarted job does not repeat it; a slowed rank stays slow across
// restarts, as a slow host would.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "herd/parallel/context.h"
#include "herd/train/job/config.h"
#include "herd/train/step/step_hooks.h"

namespace herd::train {

// The hooks of cfg's faults for this rank, or null when the config injects none. wait_for_saves
// completes the rank's checkpoint writes in flight (an injected corruption targets the newest save);
// resumed_from is the step the run resumed from (-1: none).
template <typename T>
std::unique_ptr<StepHooks<T>> make_fault_injector(const TrainConfig& cfg, const parallel::ParallelContext& ctx,
                                                  std::int64_t resumed_from, std::function<void()> wait_for_saves);

}  // namespace herd::train
