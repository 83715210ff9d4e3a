// The trainer's straggler watch (see straggler_monitor.h).
#include "herd/train/step/straggler_monitor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "herd/core/format.h"
#include "herd/core/launch_env.h"
#include "herd/core/stats.h"
#include "herd/core/timer.h"

namespace herd::train {

namespace {
constexpr int kHostChars = 64;  // a host name's first 64 characters identify it well enough in a report
}  // namespace

comm::FlightRecorder::StepTimes split_step(std::int64_t step, double wall_s, const measure::ThreadClock& start,
                                           const measure::ThreadClock& end,
                                           const measure::TimedCommunicator::Totals& comm_start,
                                           const measure::TimedCommunicator::Totals& comm_end) {
  comm::FlightRecorder::StepTimes t;
  t.step = step;
  t.wait_s = std::max(0.0, comm_end.wall_s - comm_start.wall_s);
  t.busy_s = std::max(0.0, (end.cpu_s - start.cpu_s) - (comm_end.cpu_s - comm_start.cpu_s));
  t.queued_s = std::max(0.0, (end.queued_s - start.queued_s) - (comm_end.queued_s - comm_start.queued_s));
  t.stall_s = std::max(0.0, wall_s - t.wait_s - t.busy_s - t.queued_s);
  return t;
}

namespace {

class MeasuredStepClock final : public StepClock {
 public:
  explicit MeasuredStepClock(std::function<measure::TimedCommunicator::Totals()> comm_totals)
      : comm_totals_(std::move(comm_totals)) {}

  void start_step() override {
    wall_.reset();
    comm_start_ = comm_now();
    start_ = measure::thread_clock();
  }

  comm::FlightRecorder::StepTimes split(std::int64_t step) override {
    return split_step(step, wall_.seconds(), start_, measure::thread_clock(), comm_start_, comm_now());
  }

  // Computing, not sleeping: a slow rank is not told apart from real work by how it is slow. The
  // wall-clock cap only guards against a CPU clock that does not advance.
  void compute_for(double cpu_s) override {
    if (!(cpu_s > 0)) return;
    const double start = thread_cpu_seconds();
    Timer wall;
    volatile double sink = 1.0;
    while (thread_cpu_seconds() - start < cpu_s && wall.seconds() < 60.0 + 100.0 * cpu_s) {
      double x = sink;
      for (int i = 0; i < 4096; ++i) x = x * 0.999999 + 1e-9;
      sink = x;
    }
  }

  void stall_for(double s) override {
    if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
  }

 private:
  measure::TimedCommunicator::Totals comm_now() const {
    return comm_totals_ ? comm_totals_() : measure::TimedCommunicator::Totals{};
  }

  std::function<measure::TimedCommunicator::Totals()> comm_totals_;
  Timer wall_;
  measure::ThreadClock start_;
  measure::TimedCommunicator::Totals comm_start_;
};

}  // namespace

std::unique_ptr<StepClock> measured_step_clock(std::function<measure::TimedCommunicator::Totals()> comm_totals) {
  return std::make_unique<MeasuredStepClock>(std::move(comm_totals));
}

Result<StragglerMonitor> StragglerMonitor::make(const DiagnosticsSection& d, const parallel::ParallelContext& ctx) {
  StragglerMonitor m;
  m.world_ = static_cast<int>(ctx.dims.world());
  m.rank_ = ctx.rank;
  m.every_ = d.straggler_every;
  m.window_ = d.straggler_window;
  m.thresholds_.slow = d.straggler_threshold;
  m.thresholds_.stalled = d.straggler_stall_threshold;
  // Stages and hosts never change during a run: one all-reduce at start, each rank filling its row.
  const auto w = static_cast<std::size_t>(m.world_);
  std::vector<std::int32_t> rows(w * (1 + kHostChars), 0);
  const std::string host = this_host();
  std::int32_t* mine = rows.data() + static_cast<std::size_t>(m.rank_) * (1 + kHostChars);
  mine[0] = ctx.pp_rank();
  for (int i = 0; i < kHostChars && i < static_cast<int>(host.size()); ++i)
    mine[1 + i] = static_cast<unsigned char>(host[i]);
  if (m.world_ > 1) {
    HERD_RETURN_IF_ERROR(ctx.world->all_reduce(rows.data(), rows.size(), DType::kI32, comm::ReduceOp::kMax));
  }
  std::map<int, int> per_stage;
  for (std::size_t r = 0; r < w; ++r) {
    const std::int32_t* row = rows.data() + r * (1 + kHostChars);
    m.stages_.push_back(row[0]);
    ++per_stage[row[0]];
    std::string h;
    for (int i = 0; i < kHostChars && row[1 + i] != 0; ++i) h.push_back(static_cast<char>(row[1 + i]));
    m.hosts_.push_back(h);
  }
  const bool peers = std::any_of(per_stage.begin(), per_stage.end(), [](const auto& s) { return s.second >= 2; });
  m.enabled_ = m.world_ > 1 && m.every_ > 0 && peers;
  return m;
}

void StragglerMonitor::add_step(const comm::FlightRecorder::StepTimes& t) {
  if (!enabled_) return;
  steps_.push_back(t);
  while (static_cast<std::int64_t>(steps_.size()) > window_) steps_.pop_front();
}

bool StragglerMonitor::due(std::int64_t step) const {
  return enabled_ && step % every_ == 0 && static_cast<std::int64_t>(steps_.size()) >= window_;
}

std::vector<double> StragglerMonitor::slots() const {
  using Times = comm::FlightRecorder::StepTimes;
  static constexpr double Times::*kFields[kSlots] = {&Times::busy_s, &Times::stall_s, &Times::queued_s, &Times::wait_s};
  std::vector<double> v(kSlots * static_cast<std::size_t>(world_), 0.0);
  double* mine = v.data() + kSlots * static_cast<std::size_t>(rank_);
  std::vector<double> x;
  x.reserve(steps_.size());
  for (int f = 0; f < kSlots; ++f) {
    x.clear();
    for (const Times& t : steps_) x.push_back(t.*kFields[f]);
    mine[f] = kFields[f] == &Times::wait_s ? mean(x) : median(x);  // comm::RankStepTimes says why
  }
  return v;
}

std::vector<comm::Straggler> StragglerMonitor::observe(const double* gathered, std::int64_t step) {
  std::vector<comm::RankStepTimes> ranks;
  for (int r = 0; r < world_; ++r) {
    comm::RankStepTimes t;
    t.rank = r;
    t.stage = stages_[static_cast<std::size_t>(r)];
    t.host = hosts_[static_cast<std::size_t>(r)];
    const double* g = gathered + kSlots * r;
    t.busy_s = g[0];
    t.stall_s = g[1];
    t.queued_s = g[2];
    t.wait_s = g[3];
    ranks.push_back(std::move(t));
  }
  // A rank over a threshold at one check is a candidate; at kChecksInARow checks in a row (it stayed
  // slower over window + 2 x every steps), a straggler.
  const std::vector<comm::Straggler> over = comm::find_stragglers(ranks, thresholds_);
  std::vector<comm::Straggler> now;
  std::map<int, int> runs;
  for (const comm::Straggler& s : over) {
    const int run = (runs_.count(s.rank) ? runs_.at(s.rank) : 0) + 1;
    runs[s.rank] = run;
    if (run >= kChecksInARow) now.push_back(s);
  }
  runs_ = std::move(runs);
  ++checks_;
  news_.clear();
  for (const comm::Straggler& s : now) {
    History& h = history_[s.rank];
    const bool was = std::any_of(current_.begin(), current_.end(), [&](const auto& c) { return c.rank == s.rank; });
    if (!was) {
      std::ostringstream o;
      o << "straggler at step " << step << ": " << comm::describe_straggler(s);
      news_.push_back(o.str());
    }
    if (h.flagged == 0) h.first_step = step;
    ++h.flagged;
    h.last_step = step;
    h.worst = std::max(h.worst, s.slowdown);
    h.last = s;
  }
  for (const comm::Straggler& c : current_) {
    const bool still = std::any_of(now.begin(), now.end(), [&](const auto& s) { return s.rank == c.rank; });
    if (!still) {
      std::ostringstream o;
      o << "straggler at step " << step << ": rank " << c.rank << " is back within the thresholds of its peers' median";
      news_.push_back(o.str());
    }
  }
  current_ = now;
  return now;
}

// Strings are built with streams here: GCC 12's -O3 warns (-Wrestrict) on chains of string + literal.
std::string StragglerMonitor::progress_suffix() const {
  std::ostringstream o;
  for (std::size_t i = 0; i < current_.size(); ++i) {
    o << (i == 0 ? " | straggler " : ", ") << "r" << current_[i].rank << " " << format_fixed(current_[i].slowdown, 2)
      << "x" << (current_[i].kind == comm::StragglerKind::kStalled ? " stalled" : "");
  }
  return o.str();
}

std::string StragglerMonitor::summary() const {
  std::ostringstream o;
  o << (history_.empty() ? "stragglers: none in " : "stragglers in ") << checks_ << " check(s): every " << every_
    << " steps, medians over " << window_ << " steps, thresholds " << format_fixed(thresholds_.slow, 2)
    << "x its stage's peers' CPU time (slow) and " << format_fixed(thresholds_.stalled, 2)
    << "x their time computing or stalled (stalled)";
  if (history_.empty()) return o.str();
  o << ":";
  for (const auto& [rank, h] : history_) {
    o << "\n  rank " << rank << " flagged at " << h.flagged << " check(s), steps " << h.first_step << "-" << h.last_step
      << ", up to " << format_fixed(h.worst, 2) << "x; last: " << comm::describe_straggler(h.last);
  }
  return o.str();
}

}  // namespace herd::train
