// The trainer's straggler watch (see straggler_monitor.h).
#include "herd/train/straggler_monitor.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "herd/core/format.h"
#include "herd/core/stats.h"

namespace herd::train {

namespace {
constexpr int kHostChars = 64;  // a host name's first 64 characters identify it well enough in a report
}  // namespace

Result<StragglerMonitor> StragglerMonitor::make(const DiagnosticsSection& d, const parallel::ParallelContext& ctx) {
  StragglerMonitor m;
  m.world_ = static_cast<int>(ctx.dims.world());
  m.rank_ = ctx.rank;
  m.every_ = d.straggler_every;
  m.window_ = d.straggler_window;
  m.threshold_ = d.straggler_threshold;
  // Stages and hosts never change during a run: one all-reduce at start, each rank filling its row.
  const auto w = static_cast<std::size_t>(m.world_);
  std::vector<std::int32_t> rows(w * (1 + kHostChars), 0);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::int32_t* mine = rows.data() + static_cast<std::size_t>(m.rank_) * (1 + kHostChars);
  mine[0] = ctx.pp_rank();
  for (int i = 0; i < kHostChars && host[i] != 0; ++i) mine[1 + i] = static_cast<unsigned char>(host[i]);
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

void StragglerMonitor::add_step(double busy_s, double wait_s) {
  if (!enabled_) return;
  busy_.push_back(std::max(0.0, busy_s));
  wait_.push_back(std::max(0.0, wait_s));
  while (static_cast<std::int64_t>(busy_.size()) > window_) {
    busy_.pop_front();
    wait_.pop_front();
  }
}

bool StragglerMonitor::due(std::int64_t step) const {
  return enabled_ && step % every_ == 0 && static_cast<std::int64_t>(busy_.size()) >= window_;
}

std::vector<double> StragglerMonitor::slots() const {
  std::vector<double> v(2 * static_cast<std::size_t>(world_), 0.0);
  v[2 * static_cast<std::size_t>(rank_)] = median(std::vector<double>(busy_.begin(), busy_.end()));
  v[2 * static_cast<std::size_t>(rank_) + 1] = median(std::vector<double>(wait_.begin(), wait_.end()));
  return v;
}

std::vector<comm::Straggler> StragglerMonitor::observe(const double* gathered, std::int64_t step) {
  std::vector<comm::RankStepTimes> ranks;
  for (int r = 0; r < world_; ++r) {
    comm::RankStepTimes t;
    t.rank = r;
    t.stage = stages_[static_cast<std::size_t>(r)];
    t.host = hosts_[static_cast<std::size_t>(r)];
    t.busy_s = gathered[2 * r];
    t.wait_s = gathered[2 * r + 1];
    ranks.push_back(std::move(t));
  }
  // A rank over the threshold at one check is a candidate; at kChecksInARow checks in a row (it stayed
  // slower over window + 2 x every steps), a straggler. One window's median can still catch a burst of
  // contention on a shared host (bench/diagnosis measured one such 1.39x flag in 380 checks with two in
  // a row under heavy load); three in a row need it to last 18 steps.
  const std::vector<comm::Straggler> over = comm::find_stragglers(ranks, threshold_);
  std::vector<comm::Straggler> now;
  std::vector<int> candidates;
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
      o << "straggler at step " << step << ": rank " << c.rank << " is back within " << format_fixed(threshold_, 2)
        << "x of its peers' median";
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
      << "x";
  }
  return o.str();
}

std::string StragglerMonitor::summary() const {
  std::ostringstream o;
  o << (history_.empty() ? "stragglers: none in " : "stragglers in ") << checks_ << " check(s): every " << every_
    << " steps, medians over " << window_ << " steps, threshold " << format_fixed(threshold_, 2)
    << "x its stage's peers";
  if (history_.empty()) return o.str();
  o << ":";
  for (const auto& [rank, h] : history_) {
    o << "\n  rank " << rank << " flagged at " << h.flagged << " check(s), steps " << h.first_step << "-" << h.last_step
      << ", up to " << format_fixed(h.worst, 2) << "x; last: " << comm::describe_straggler(h.last);
  }
  return o.str();
}

}  // namespace herd::train
