// Elastic restarts (fault.elastic): when ranks are lost for good, the supervisor restarts the job on
// the survivors at the fastest layout the planner finds for them, keeping the global batch, the
// sequence length and the data order, so the run continues on the curve it was on (the checkpoint
// resumes at any layout). This file is the planning half: the layout for fewer ranks and the command
// rewritten to it. train/job/supervisor.h runs the attempts; docs/reliability.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/model/config.h"
#include "herd/planner/layout.h"
#include "herd/planner/search.h"
#include "herd/train/job/config.h"

namespace herd::cli {

// planner::plan for the run's model, global batch, sequence and precision on `ranks` ranks of this
// machine's calibrated cluster (projection.cluster_file, else the local-cpu preset), with herd's
// software and FSDP (one rank: plain AdamW).
Result<planner::PlanResult> plan_for_run(const train::TrainConfig& cfg, const model::LlamaConfig& m, std::int64_t ranks,
                                         planner::SearchSpace space);

struct ElasticChoice {
  planner::Layout layout;  // runnable: train::check_layout accepts it at its rank count
  double step_s = 0;       // the planner's step time
};

// The fastest layout on `ranks` ranks or fewer that the planner ranks and the runtime accepts. `world`
// is the launcher's fixed rank count (mpirun's -np is chosen with the layout, so 0 here).
Result<ElasticChoice> best_layout_within(const train::TrainConfig& cfg, const model::LlamaConfig& m,
                                         std::int64_t ranks);

// `command` (herd train ..., or mpirun ... -np N ... herd train ...) with its layout flags and
// parallel.* degrees replaced by `layout`'s flags, mpirun's -np by the layout's rank count, and the
// fault.lose_* settings dropped (that loss has happened).
std::vector<std::string> with_layout(std::vector<std::string> command, const planner::Layout& layout);

// The supervisor's replan callback for a job of `cfg` (its layout the one running now): the best
// layout within the survivors, said with the old one and the planner's predicted slowdown, as the
// next attempts' command.
std::function<Result<std::vector<std::string>>(std::int64_t)> elastic_replan(const train::TrainConfig& cfg,
                                                                             const model::LlamaConfig& m,
                                                                             std::vector<std::string> command);

}  // namespace herd::cli
