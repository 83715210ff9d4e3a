// A job's trace held against its plan: each rank's measured time per step beside what the planner
// predicted for its pipeline stage, and the stage or rank that departs most from the plan.
//
// The plan is the run's projection file (`train.projection_file`, train/plan/projection.h): the
// planner's busy time of each pipeline stage per step (compute with its TP and CP collectives, all
// micro-batches, planner::Estimate::pipeline_rank_busy_s), its optimizer step and its step time. The
// measurement is each rank's own time per step (CPU time outside collectives plus the time it stood
// stopped or asleep there, the medians the straggler watch uses, comm/stragglers.h) from the dumps.
//
// Every rank's ratio measured / planned is divided by the median ratio over the ranks: what is left is
// how far a rank departs from the plan beyond what the whole run does (a host faster or slower than its
// calibration moves every ratio alike). A heavier stage the plan knows about does not depart; a rank
// slower than its stage's plan does. A stage departs when every rank of it does (the stage's work is
// off: a layer split, a head), a rank when it departs without its stage (a slow host). The median is
// the run's yardstick, so it needs most ranks on the plan: with two stages, one stage off the plan and
// the whole run off it look alike. The exposed
// communication (measured: the mean wait in collectives; planned: step time less busy time) is set
// beside it for every rank.
#pragma once

#include <string>
#include <vector>

#include "herd/comm/trace_analysis.h"
#include "herd/core/error.h"
#include "herd/core/json.h"

namespace herd::comm {

struct PlannedSteps {
  std::vector<double> stage_busy_s;  // per pipeline stage, seconds per step
  double optimizer_s = 0;            // every rank's optimizer step
  double step_s = 0;
  std::string source;  // the file it came from, for the report
};

// The "planned" section of a projection file (train.projection_file); errors name the file and field.
Result<PlannedSteps> read_planned_steps(const std::string& projection_file);

// A departure of this size (1.25: 25% beyond the run's median ratio) or more is named.
inline constexpr double kPlanDepartureThreshold = 1.25;

struct RankVsPlan {
  int rank = 0, stage = 0;
  double planned_s = 0;       // busy: the stage's planned busy time + the optimizer step
  double measured_s = 0;      // own time: busy + stall (medians)
  double departure = 0;       // (measured / planned) / the median of that ratio over the ranks
  double planned_wait_s = 0;  // step time - planned busy time
  double wait_s = 0;          // measured mean wait in collectives
};

struct PlanComparison {
  std::vector<RankVsPlan> ranks;  // by rank
  int steps = 0;                  // the steps the medians cover
  double median_ratio = 0;        // measured / planned over the ranks: the run against the plan
  int departing_rank = -1;        // the rank that departs most, when by kPlanDepartureThreshold or more
  int departing_stage = -1;       // its stage, when the stage's median departs as much
  std::string finding;            // one line
};

// Errors: no dump carries step times, or a rank's stage has no planned time (the plan is another job's).
Result<PlanComparison> compare_with_plan(const std::vector<RankDump>& dumps, const PlannedSteps& plan);

std::string plan_comparison_text(const PlanComparison& c, const PlannedSteps& plan);
// {"source", "steps", "median_ratio", "departing_rank", "departing_stage", "finding",
//  "ranks": [{"rank", "stage", "planned_s", "measured_s", "departure", "planned_wait_s", "wait_s"}]}
Json plan_comparison_json(const PlanComparison& c, const PlannedSteps& plan);

}  // namespace herd::comm
