// Stragglers: which ranks make the others wait, from each rank's busy time and its time in collectives.
//
// A rank's step splits into busy time (computing, copying, anything but waiting) and the time it spends
// blocked in collectives. In a synchronous job every rank ends up waiting for the slowest one, so step
// times alone cannot name it: the slow rank's step is as long as everyone's. Its busy time is not. A rank
// whose busy time stays above its peers' median by a threshold is a straggler; the peers are the ranks
// that do the same work, those of the same pipeline stage (TP, CP and DP ranks of one stage run the same
// shapes; stages differ: the last one holds the output layer), and the others wait on it in their
// collectives. Each rank's figures are medians over a window of steps, so one descheduled step on a
// shared host is not a straggler; a rank slowed for the whole window is.
//
// The trainer feeds this with the figures it gathers every few steps (train/straggler_monitor.h) and
// `herd trace` with the step times each flight-recorder dump carries (trace_analysis.h): one rule for
// both, so a live flag and a post-mortem agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/json.h"

namespace herd::comm {

// One rank's medians over the window (seconds per step).
struct RankStepTimes {
  int rank = 0;
  int stage = 0;  // pipeline stage: the peers are the ranks of the same stage
  std::string host;
  double busy_s = 0;  // the step's time outside collectives
  double wait_s = 0;  // the step's time blocked in collectives
};

struct Straggler {
  int rank = 0;
  std::string host;
  double slowdown = 0;            // busy_s / the median busy_s of its peers (the other ranks of its stage)
  double busy_s = 0, wait_s = 0;  // its own medians
  double peers_busy_s = 0, peers_wait_s = 0;
  std::vector<int> waited_on_by;  // ranks whose median wait exceeds its own by half its extra busy time
};

// The default threshold: a rank 30% busier than its peers' median. A 1.5x straggler clears it with room;
// a shared host's noise, as a median over ten steps, stays well under it (docs/reliability.md#stragglers).
inline constexpr double kStragglerThreshold = 1.3;

// The stragglers among `ranks`, the slowest first. A stage with a single rank has no peers: its ranks are
// compared with nobody (a pure pipeline cannot tell a slow host from a heavier stage). Ranks with no busy
// time measured (busy_s <= 0) are skipped.
std::vector<Straggler> find_stragglers(const std::vector<RankStepTimes>& ranks, double threshold = kStragglerThreshold);

// {"rank", "host", "slowdown", "busy_s", "wait_s", "peers_busy_s", "peers_wait_s", "waited_on_by"}.
Json straggler_json(const Straggler& s);
// "rank 3 (host-a) is 1.52x busier than its peers' median (31.0 ms vs 20.4 ms a step); ranks 0,1,2 wait
// on it (10.6 ms a step in collectives vs its 0.1 ms)".
std::string describe_straggler(const Straggler& s);

}  // namespace herd::comm
