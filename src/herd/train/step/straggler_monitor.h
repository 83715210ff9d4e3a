// The trainer's straggler watch: every rank's split of its steps, gathered every few steps, judged by one
// rule.
//
// Each rank splits each of its steps (split_step below) with the scheduler clocks of its thread
// (measure/thread_clock.h) and the launcher's timed communicator, which counts the same clocks inside
// collectives:
//   - busy: the CPU time it computed (its CPU time less the CPU time it spent inside collectives, where a
//     backend polls or reduces);
//   - queued: the time it was runnable outside collectives but waited for a core other threads held;
//   - stall: the rest of its wall time outside collectives: off the CPU without waiting for one
//     (stopped by a signal, asleep, blocked on I/O or a lock);
//   - wait: the wall time blocked in collectives.
// A rank is slow when its busy time is diagnostics.straggler_threshold x its peers', stalled when its
// busy + stall time is diagnostics.straggler_stall_threshold x theirs (comm/stragglers.h). The queued
// time is left out: on a host with more runnable threads than cores (ranks as threads in tests, a CI
// machine running other jobs) every rank waits for a core in turn, and the scheduler's unfairness, which
// over a window of steps gave one rank 2.5x its peers' wall time here, is not the rank's doing; a rank
// that computes more slowly (a slower or throttled core, more work, fault.slow_rank) or that stops
// (SIGSTOP, fault.slow_mode=stall) is. With several OpenMP or BLAS
// threads per rank only the rank's own thread is measured: its share of the work and its spin at the
// team's barriers, which still scales with the rank's compute.
//
// Every diagnostics.straggler_every steps the medians of the last diagnostics.straggler_window steps
// ride on the per-step control all-reduce the ranks already do (kSlots slots per rank; no extra
// collective), so every rank holds every rank's figures and comm::find_stragglers (comm/stragglers.h)
// names the ranks over a threshold against their stage's peers at three checks in a row (so over window + 2 x every
// steps: one window's median can still catch a burst on a shared host; three in a row rarely do). Rank 0 reports them:
// a warning when a rank starts or stops straggling, the progress line, a `stragglers` list in the metrics record of
// every check (empty when none), and a summary at the end. The ranks' hosts and pipeline stages are gathered once, when
// the monitor is made.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "herd/comm/flight_recorder.h"
#include "herd/comm/stragglers.h"
#include "herd/measure/comm_timer.h"
#include "herd/measure/thread_clock.h"
#include "herd/parallel/context.h"
#include "herd/train/job/config.h"

namespace herd::train {

// One step of one rank, split as above, from its wall time, the thread's clocks and the communicator's
// totals at the step's start and end.
comm::FlightRecorder::StepTimes split_step(std::int64_t step, double wall_s, const measure::ThreadClock& start,
                                           const measure::ThreadClock& end,
                                           const measure::TimedCommunicator::Totals& comm_start,
                                           const measure::TimedCommunicator::Totals& comm_end);

// Where a rank's step split comes from. The trainer starts it at each step's start, reads the split of
// the step so far after the step's last collective, and runs fault.slow_rank's extra work through it, so
// a clock that does not read the host's clocks also sees the fault. measured_step_clock (the trainer's
// clock) reads the thread's scheduler clocks and the communicator's totals; the straggler watch's tests
// give every rank a clock whose figures they set (docs/testing.md), so that what they assert does not
// depend on the host's speed or scheduler.
class StepClock {
 public:
  virtual ~StepClock() = default;
  virtual void start_step() = 0;
  // The split (split_step) of the step since start_step, numbered `step`.
  virtual comm::FlightRecorder::StepTimes split(std::int64_t step) = 0;
  // fault.slow_rank: `cpu_s` more seconds of computing in this step (slow_mode=compute: a slower core),
  // or `s` seconds off the CPU (stall: a rank stopped or preempted while it should compute).
  virtual void compute_for(double cpu_s) = 0;
  virtual void stall_for(double s) = 0;
};

// The clock of the calling thread's scheduler clocks (measure/thread_clock.h) and the wall time, with
// `comm_totals` (the launcher's TimedCommunicator) for the time inside collectives; unset: no
// collectives counted. compute_for keeps the thread computing until its CPU clock has advanced by cpu_s
// (extra work, measured as any rank's busy time is); stall_for sleeps.
std::unique_ptr<StepClock> measured_step_clock(std::function<measure::TimedCommunicator::Totals()> comm_totals);

class StragglerMonitor {
 public:
  static constexpr int kChecksInARow = 3;
  // The gather's slots per rank: its median busy, stall and queued seconds and its mean wait.
  static constexpr int kSlots = 4;
  // Gathers every rank's host and pipeline stage (collective over ctx.world). Off (enabled() false) for
  // one rank, diagnostics.straggler_every = 0, or a layout where no stage has two ranks.
  static Result<StragglerMonitor> make(const DiagnosticsSection& d, const parallel::ParallelContext& ctx);
  StragglerMonitor() = default;

  bool enabled() const { return enabled_; }
  // This rank's measured step.
  void add_step(const comm::FlightRecorder::StepTimes& t);
  // Whether the control all-reduce of step `step` (1-based) carries the gather: every rank answers the
  // same, from the step number and the samples every rank has alike.
  bool due(std::int64_t step) const;
  // The gather's slots: kSlots x world doubles, zero but this rank's, for an all-reduce with max.
  std::vector<double> slots() const;
  // Reads the gathered slots of step `step`: the stragglers now, the slowest first. Keeps the record
  // for the summary.
  std::vector<comm::Straggler> observe(const double* gathered, std::int64_t step);

  // " | straggler r3 1.52x" (" stalled" after a stalled rank) for the progress line; "" when none.
  std::string progress_suffix() const;
  // What changed at the last observe: "straggler: rank 3 ..." warnings and "... back within" notes.
  const std::vector<std::string>& news() const { return news_; }
  // The end summary: each rank ever flagged (checks, steps, the worst slowdown, who waited), or none.
  std::string summary() const;
  std::int64_t checks() const { return checks_; }

 private:
  bool enabled_ = false;
  int world_ = 1, rank_ = 0;
  std::int64_t every_ = 0, window_ = 0;
  comm::StragglerThresholds thresholds_;
  std::vector<int> stages_;
  std::vector<std::string> hosts_;
  std::deque<comm::FlightRecorder::StepTimes> steps_;  // this rank's last window steps
  std::int64_t checks_ = 0;
  std::vector<comm::Straggler> current_;
  std::map<int, int> runs_;  // rank -> checks in a row it has been over the threshold
  std::vector<std::string> news_;
  struct History {
    std::int64_t flagged = 0, first_step = 0, last_step = 0;
    double worst = 0;
    comm::Straggler last;
  };
  std::map<int, History> history_;
};

}  // namespace herd::train
