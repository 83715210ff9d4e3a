// The trainer's straggler watch: every rank's busy time, gathered every few steps, judged by one rule.
//
// Each rank measures its own steps: the busy time (the step's wall time minus its time blocked in
// collectives, which the launcher's timed communicator counts) and the wait. Every
// diagnostics.straggler_every steps the medians of its last diagnostics.straggler_window steps ride on
// the per-step control all-reduce the ranks already do (two slots per rank; no extra collective), so
// every rank holds every rank's figures and comm::find_stragglers (comm/stragglers.h) names the ranks
// busier than their stage's peers by diagnostics.straggler_threshold at three checks in a row (so over
// window + 2 x every steps: one window's median can still catch a burst of contention on a shared
// host; three in a row rarely do). Rank 0 reports them: a warning when
// a rank starts or stops straggling, the progress line, a `stragglers` list in the metrics record of
// every check (empty when none), and a summary at the end. The ranks' hosts and pipeline stages are
// gathered once, when the monitor is made.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "herd/comm/stragglers.h"
#include "herd/parallel/context.h"
#include "herd/train/config.h"

namespace herd::train {

class StragglerMonitor {
 public:
  static constexpr int kChecksInARow = 3;
  // Gathers every rank's host and pipeline stage (collective over ctx.world). Off (enabled() false) for
  // one rank, diagnostics.straggler_every = 0, or a layout where no stage has two ranks.
  static Result<StragglerMonitor> make(const DiagnosticsSection& d, const parallel::ParallelContext& ctx);
  StragglerMonitor() = default;

  bool enabled() const { return enabled_; }
  // This rank's measured step.
  void add_step(double busy_s, double wait_s);
  // Whether the control all-reduce of step `step` (1-based) carries the gather: every rank answers the
  // same, from the step number and the samples every rank has alike.
  bool due(std::int64_t step) const;
  // The gather's slots: 2 x world doubles, zero but this rank's two (its median busy and wait seconds),
  // for an all-reduce with max.
  std::vector<double> slots() const;
  // Reads the gathered slots of step `step`: the stragglers now, the slowest first. Keeps the record
  // for the summary.
  std::vector<comm::Straggler> observe(const double* gathered, std::int64_t step);

  // " | straggler r3 1.52x" for the progress line; "" when none.
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
  double threshold_ = comm::kStragglerThreshold;
  std::vector<int> stages_;
  std::vector<std::string> hosts_;
  std::deque<double> busy_, wait_;  // this rank's last window steps
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
