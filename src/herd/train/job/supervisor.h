// The supervisor: runs a training job as a child process and restarts it when it fails.
//
// `herd train --max-restarts K` (fault.max_restarts) makes the herd process a parent that runs the same
// command line as a child (plus --supervised, so the child trains instead of supervising again);
// `herd launch -np N --max-restarts K -- herd train ...` does the same around `mpirun`, since one dead
// MPI rank takes the whole mpirun job down. Each attempt gets its own job id (diagnostics.job_id =
// <job>-<attempt>), which names its flight-recorder dumps. The child's stderr passes through the
// supervisor, which keeps its error lines.
//
// On a failure (a non-zero exit, a rank killed by a signal, a hang the watchdog ended) the supervisor
// says what failed and why (the child's error line, and the dumps in diagnostics.dir with their
// reasons), waits a backoff (fault.restart_backoff_s, doubling while attempts fail before their first step, at most 60
// s) and restarts with
// --checkpoint.fallback=true, so the job resumes from the newest checkpoint that verifies. After K
// restarts it stops. With elastic restarts, an attempt whose ranks were lost for good is followed by
// attempts on the survivors at a re-planned layout (SupervisorOptions::replan). SIGTERM, SIGINT and SIGUSR1 are
// forwarded to the child's process group (a preemption: the child checkpoints and exits 143, or 130 after SIGINT); a
// child that exits after a forwarded signal is not restarted and the supervisor exits 143, or 130 after SIGINT. SIGUSR2
// is forwarded too: the child dumps its flight recorders and trains on. At the end it prints the time accounting
// (train/job/ett.h), whose last line contains "ETT", and appends the same as the last record of the metrics file.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/train/job/ett.h"

namespace herd::train {

struct SupervisorOptions {
  std::vector<std::string> command;  // the child's argv; command[0] is run as is (a path or a name on PATH)
  std::int64_t max_restarts = 0;
  double backoff_s = 1;
  std::string metrics_file;     // where the job's rank 0 writes its step records (required)
  std::string diagnostics_dir;  // where its ranks dump their flight recorders
  std::string job_id;           // the attempts are <job_id>-0, <job_id>-1, ...
  // Elastic restarts (fault.elastic): the job's rank count, and the command for fewer ranks. When a
  // failed attempt reports ranks lost for good ("rank R is lost for good"), replan gets the surviving
  // count and returns the next attempts' command (the re-planned layout, resuming from the newest
  // checkpoint), or an error, after which the job restarts at its layout as without elastic.
  std::int64_t ranks = 0;
  std::function<Result<std::vector<std::string>>(std::int64_t survivors)> replan;
  // Where the job can run now (herd launch --host-discovery): called before every attempt. Its
  // launcher_args go right after command[0] (mpirun's --host list). With elastic restarts the attempt's
  // rank budget is min(slots, ranks): below the ranks running it re-plans onto the budget; back at the
  // job's own count it runs the job's own layout again (replan returns it), so a job that shrank grows
  // back when its hosts return.
  struct Discovered {
    std::int64_t slots = 0;
    std::vector<std::string> launcher_args;
    std::string hosts;  // for the log: "node1:4,node2:4"
  };
  std::function<Result<Discovered>()> discover;
};

// The distinct ranks the lines name as lost for good ("rank R is lost for good").
std::vector<std::int64_t> lost_ranks(const std::vector<std::string>& lines);

// Runs the job to completion or exhaustion; returns the exit status for the supervisor's process:
// 0 when the job finished, 143 when it was preempted by a forwarded signal (130 for SIGINT), else the last failure's
// status (1 when that was 0 or unknown).
int run_supervised(const SupervisorOptions& options, EttSummary* summary = nullptr);

// The supervisor's children die with it, however it ends (kill -9 included): the child it forks asks the
// kernel for SIGKILL when its parent exits (PR_SET_PDEATHSIG), and runs in its own process group. mpirun
// does not end its ranks when it is killed, so each process of the job below the child (an MPI rank
// under herd launch) calls end_with_supervisor, which watches the supervisor (its pid is in
// HERD_SUPERVISOR_PID) and kills the calling process when the supervisor has exited. Outside a
// supervisor it does nothing.
inline constexpr const char* kSupervisorPidEnv = "HERD_SUPERVISOR_PID";
void end_with_supervisor();

// The absolute path of the running executable (/proc/self/exe), for a child that is this program.
std::string self_executable();

}  // namespace herd::train
