// StepHooks: the points of a rank's step where something outside training may act, so that the step
// loop itself holds no test or drill logic. Fault injection (train/job/fault_injector.h) is the one
// production user; the trainer calls each hook at its point and knows nothing of what it does.
#pragma once

#include <cstdint>

#include "herd/core/error.h"
#include "herd/parallel/rank_model.h"
#include "herd/train/step/straggler_monitor.h"

namespace herd::train {

template <typename T>
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // Before step `step` (1-based) starts; an error ends the rank (an injected kill).
  virtual Status before_step(std::int64_t step) {
    (void)step;
    return Status::Ok();
  }
  // After step `step`'s backward, before its gradient norm: the rank's shards, gradients included.
  virtual void after_backward(std::int64_t step, parallel::RankModel<T>& model) {
    (void)step;
    (void)model;
  }
  // After step `step`'s update, inside its time, through its clock (a slowed rank works or sleeps there).
  virtual void after_update(std::int64_t step, StepClock& clock) {
    (void)step;
    (void)clock;
  }
  // Whether this rank's save of step `step` fails as a full disk would.
  virtual bool fail_save(std::int64_t step) {
    (void)step;
    return false;
  }
};

}  // namespace herd::train
