// Effective training time: where the wall time of a supervised job went, from its metrics records.
//
// The supervisor (train/job/supervisor.h) runs a job as attempts, one process (or mpirun) each, and keeps the
// step records each attempt wrote (train/step/metrics.h: "step", "time" at the step's end, "step_s", and
// "checkpoint_s" where a step checkpointed). A step is kept when no later attempt ran it again; a step
// a later attempt redid was lost work. Over the supervisor's wall time:
//   startup_s     the first attempt's start to its first step's start (process start, data, model, plan)
//   restart_s     the same for every later attempt, plus attempts that failed before any step
//   productive_s  the kept steps, from the previous record's end to their own (evaluations included),
//                 less their checkpoint_s; degraded_s is the part run on fewer ranks than the job's
//                 most (after an elastic restart; the records' "ranks")
//   checkpoint_s  time on the critical path spent checkpointing by kept steps
//   lost_s        the steps that were redone, and a failed attempt's time after its last step (the
//                 partial step, the detection: a collective's timeout or the watchdog)
//   backoff_s     waits between attempts
//   other_s       the rest (the end of the last attempt: final evaluation, gathering, exit)
// ETT = productive_s / wall_s. The parts add up to the wall time (other_s takes the rounding).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/json.h"

namespace herd::train {

struct Attempt {
  double start = 0, end = 0;  // unix seconds: the process started, and was reaped
  int exit_code = 0;          // 0 done; 143 preempted; else failed (128 + signal when killed by one)
  std::vector<Json> records;  // its step records, in file order
};

struct EttSummary {
  double wall_s = 0, productive_s = 0, lost_s = 0, restart_s = 0, startup_s = 0, checkpoint_s = 0, backoff_s = 0,
         other_s = 0;
  std::int64_t restarts = 0;
  std::int64_t steps = 0;         // the last step reached
  std::int64_t redone_steps = 0;  // step records that were run again later
  double degraded_s = 0;          // of productive_s: steps on fewer ranks than the job's most
  std::int64_t degraded_steps = 0;
  double ett() const { return wall_s > 0 ? productive_s / wall_s : 0; }
  // {"ett", "restarts", "lost_s", "restart_s", "startup_s", "productive_s", "checkpoint_s", "backoff_s",
  //  "other_s", "wall_s", "steps", "redone_steps", "degraded_s", "degraded_steps"}
  Json to_json() const;
  // The summary lines; the last one contains "ETT".
  std::vector<std::string> lines() const;
};

// Accounts the attempts of a job that ran from wall_start to wall_end (unix seconds).
EttSummary account_ett(const std::vector<Attempt>& attempts, double wall_start, double wall_end);

// The step records of a metrics file written at or after `since` (unix seconds); lines without a
// "step" or a "time" are skipped.
std::vector<Json> read_step_records(const std::string& metrics_file, double since);

}  // namespace herd::train
