// Stragglers: which ranks make the others wait, from each rank's busy time and its time in collectives.
//
// A rank's step splits into busy time (computing, copying: the CPU time it ran outside collectives),
// stalls (off the CPU outside collectives for its own reasons: stopped, asleep, blocked), time queued for
// a core (other threads held them), and the time it spends blocked in collectives. In a synchronous job every rank ends
// up waiting for the slowest one, so step times alone cannot name it: the slow rank's step is as long as everyone's.
// Its own time (busy + stalls) is not. A rank whose own time stays above its peers' median by a threshold is a
// straggler; the peers are the ranks that do the same work, those of the same pipeline stage (TP, CP and DP ranks of
// one stage run the same shapes; stages differ: the last one holds the output layer), and the others wait on it in
// their collectives. Each rank's figures are medians over a window of steps, so one disturbed step on a shared host is
// not a straggler; a rank slowed for the whole window is.
//
// The trainer feeds this with the figures it gathers every few steps (train/step/straggler_monitor.h) and
// `herd trace` with the step times each flight-recorder dump carries (trace_analysis.h): one rule for
// both, so a live flag and a post-mortem agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/json.h"

namespace herd::comm {

// One rank's figures over the window (seconds per step): medians, so that one disturbed step is not a
// straggler, but for the wait, a mean: a stall (a stop of tens of milliseconds in some steps, none in
// others) makes the waits bimodal, and only means add up across ranks (a peer's mean wait is the
// straggler's plus what it lost) for "who waits on whom". A step's wall time outside collectives is
// busy_s + queued_s + stall_s.
struct RankStepTimes {
  int rank = 0;
  int stage = 0;  // pipeline stage: the peers are the ranks of the same stage
  std::string host;
  double busy_s = 0;    // computing: the rank's CPU time outside collectives (train/step/straggler_monitor.h)
  double stall_s = 0;   // off the CPU outside collectives without waiting for one: stopped, asleep, blocked
  double queued_s = 0;  // runnable outside collectives but waiting for a core other threads held
  double wait_s = 0;    // the wall time blocked in collectives (the mean)
};

// Why a rank holds the others up. kSlow: it computes more slowly (more CPU time for the same work: a
// slower or throttled core, more work). kStalled: it computes as fast, but stops between (stopped by a
// signal, asleep, blocked on I/O or a lock outside the collectives).
enum class StragglerKind { kSlow, kStalled };
const char* straggler_kind_name(StragglerKind k);  // "slow", "stalled"

struct Straggler {
  int rank = 0;
  std::string host;
  StragglerKind kind = StragglerKind::kSlow;
  // kSlow: busy_s / the median busy_s of its peers (the other ranks of its stage); kStalled: its own time
  // (busy_s + stall_s) / the median of its peers'.
  double slowdown = 0;
  double busy_s = 0, stall_s = 0, queued_s = 0, wait_s = 0;  // its own figures (RankStepTimes)
  double peers_busy_s = 0, peers_own_s = 0, peers_wait_s = 0;
  std::vector<int> waited_on_by;  // ranks whose median wait exceeds its own (slow: by half its extra time)
};

// The thresholds, as factors over the peers' median.
//   slow (1.3, diagnostics.straggler_threshold): CPU time is steady on a shared host. A 1.5x straggler
//     clears it with room, while two cores of a shared virtual machine were measured up to 1.33x apart
//     for tens of steps, so not much lower.
//   stalled (2.0, diagnostics.straggler_stall_threshold): the stall time also catches an oversubscribed
//     host's lock convoys (a thread asleep on a lock whose holder was descheduled), which took one rank's
//     own time to 2.3x its peers' at single checks here, though never at three checks in a row over 2.0;
//     a rank stopped 60% of the time read 3.2x.
// The time queued for a core is judged by neither: on an oversubscribed host every rank waits so in turn,
// up to 2.5x its peers' wall time over a window (measured), which no threshold separates from a real
// straggler. docs/reliability.md#stragglers has the measurements.
struct StragglerThresholds {
  double slow = 1.3;
  double stalled = 2.0;
};

// The stragglers among `ranks`, the slowest first. A stage with a single rank has no peers: its ranks are
// compared with nobody (a pure pipeline cannot tell a slow host from a heavier stage). Ranks with no busy
// time measured (busy_s <= 0) are skipped.
std::vector<Straggler> find_stragglers(const std::vector<RankStepTimes>& ranks, const StragglerThresholds& t = {});

// {"rank", "host", "kind", "slowdown", "busy_s", "stall_s", "queued_s", "wait_s", "peers_busy_s",
// "peers_own_s", "peers_wait_s", "waited_on_by"}.
Json straggler_json(const Straggler& s);
// "rank 3 (host-a) is 1.52x slower than its peers' median (31.0 ms vs 20.4 ms of CPU a step); ranks 0,1,2
// wait on it (10.6 ms a step in collectives vs its 0.1 ms)", or for a stalled rank "rank 3 (host-a) is
// stalled: 2.10x its peers' time (21.0 ms computing + 22.1 ms stopped, asleep or blocked a step vs
// 20.5 ms); ...".
std::string describe_straggler(const Straggler& s);

}  // namespace herd::comm
