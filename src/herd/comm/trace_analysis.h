// Cross-rank analysis of flight-recorder dumps: what `herd trace DIR` reports.
//
// Every rank of a job dumps its flight recorder (flight_recorder.h) on a timeout, a crash or a hang.
// One dump says what one rank was doing; a hang is only understood across them. This file reads the
// dumps of one job, aligns the collectives by (group_id, sequence number) using each dump's "groups"
// table (which global ranks form each group instance), and works out:
//   - stuck calls: a collective some members posted and others did not (or a send/recv whose peer has
//     not posted its side);
//   - the wait-for graph: rank A waits for rank B when A is in a call B never posted. Its roots (ranks
//     waited on that wait for nobody, or a cycle of ranks waiting on each other) are the culprits; the
//     ranks on the chains leading to them are victims of the cascade, even when they wait in a group
//     the culprit is not a member of;
//   - desyncs: the same (group, seq) posted as different calls (op, element type, count, reduction or
//     root) on different ranks;
//   - each rank's last completed step (from its last activity "step N") and the call it is in;
//   - stragglers: from the busy and wait seconds of each rank's last steps that the dumps carry, the
//     ranks slow or stalled against their pipeline stage's peers (comm/stragglers.h: the
//     trainer's own rule).
// Parsing never aborts: a malformed dump is an error naming the file and the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "herd/comm/flight_recorder.h"
#include "herd/comm/stragglers.h"
#include "herd/core/error.h"
#include "herd/core/json.h"

namespace herd::comm {

// One entry of a dump, as written (names rather than enums, so unknown values are reported, not lost).
struct DumpEntry {
  std::uint64_t id = 0;
  std::uint64_t seq = 0;
  std::string group;
  std::int64_t group_id = 0;
  std::string op;
  std::string dtype;
  std::uint64_t count = 0;
  std::string reduce;  // all_reduce and reduce_scatter only
  int peer = -1;       // group rank of the p2p peer or the broadcast root
  int tag = -1;
  double t_post = 0, t_start = -1, t_end = -1;
  std::string state;

  bool completed() const { return state == "completed"; }
  bool collective() const { return op != "send" && op != "recv"; }
};

struct RankDump {
  std::string file;
  int rank = 0;
  std::string host;
  std::string reason;
  std::string activity;   // "step 12"
  double wall_t0_s = 0;   // wall clock of the recorder's creation, seconds since the epoch
  double time_now_s = 0;  // when the dump was taken, seconds since the recorder's creation
  std::uint64_t total_recorded = 0;
  std::vector<GroupInfo> groups;
  std::vector<FlightRecorder::StepTimes> steps;  // the trainer's last measured steps (may be empty)
  std::vector<DumpEntry> entries;
};

// Parses one dump; errors name `source` (the file) and the field.
Result<RankDump> parse_flight_dump(const std::string& text, const std::string& source);

// The dumps of one job in `dir`: regular files herd_flight_<job>_rank<r>.json (anything else of that
// name, a FIFO, is passed over). `job` empty: the job whose newest dump is the most recent. A dump that
// cannot be read is left out with a warning naming it; errors (no dumps, none readable) name the
// directory or the file.
struct JobDumps {
  std::string job;
  std::vector<RankDump> ranks;  // sorted by rank
  std::vector<std::string> other_jobs;
  std::vector<std::string> warnings;  // one line per dump left out, naming the file
};
Result<JobDumps> read_job_dumps(const std::string& dir, const std::string& job);

// A collective that some members posted and others did not, or a p2p op whose peer has not posted.
struct StuckCall {
  std::string group;
  std::int64_t group_id = 0;
  std::uint64_t seq = 0;  // collectives: the group's sequence number; p2p: the waiting rank's
  std::string op;
  std::string dtype;
  std::uint64_t count = 0;
  std::vector<int> entered;  // global ranks that posted it
  std::vector<int> missing;  // global ranks that did not
  double first_post = 0;     // wall clock (s) of the earliest post
};

// The same (group, seq) posted as different calls.
struct DesyncCall {
  struct Variant {
    std::string op, dtype, reduce;
    std::uint64_t count = 0;
    int root = -1;
    std::vector<int> ranks;
  };
  std::string group;
  std::int64_t group_id = 0;
  std::uint64_t seq = 0;
  std::vector<Variant> variants;  // the most common first
};

struct RankState {
  int rank = 0;
  bool dumped = false;
  std::string host, reason, activity;
  std::optional<std::int64_t> last_step;  // last completed step, when the activity names one
  std::optional<DumpEntry> call;          // the unfinished call it is in; none: outside communication
  std::string in;                         // the call or "outside communication" / "no dump", in words
  std::vector<int> waits_for;             // global ranks
  std::string role;                       // "culprit", "victim" or "" (neither)
};

struct TraceReport {
  std::string job;
  int world = 0;
  std::vector<int> culprit_ranks;
  std::optional<StuckCall> first_disagreement;
  std::vector<StuckCall> stuck;
  std::vector<DesyncCall> desync;
  std::vector<RankState> ranks;
  std::vector<int> missing_dumps;
  // From the dumps' step times: each rank's medians over its last kStragglerWindow steps, judged as the
  // trainer judges them live (comm/stragglers.h). Empty when no rank is slow or no dump has steps.
  std::vector<Straggler> stragglers;
  int straggler_steps = 0;  // the steps those medians were taken over (0: the dumps carry none)
};

// Steps of each dump's "steps" the straggler medians use (the trainer's default window).
inline constexpr int kStragglerWindow = 10;

// Each dumped rank's figures over its last kStragglerWindow steps (medians; the wait a mean), its
// pipeline stage its place in its 'pp' group (stage 0 for every rank without one). steps_used: the
// most steps any rank's figures cover (0: the dumps carry none).
std::vector<RankStepTimes> dump_step_times(const std::vector<RankDump>& dumps, int* steps_used = nullptr);

// An unfinished call posted less than min_wait_s before its rank's dump is in flight, not stuck: it makes
// no rank wait for another (a dump taken on request, SIGUSR1/SIGUSR2 or diagnostics.dump_every, catches a
// running job mid-call; a hang's calls are as old as the timeout). Dumps without "time_now_s" have no age.
inline constexpr double kMinStuckSeconds = 0.5;
TraceReport analyze_dumps(const std::vector<RankDump>& dumps, const std::string& job = "",
                          double min_wait_s = kMinStuckSeconds);

// "all_reduce #41 of 'tp' (group 3, 1,024 f32)".
std::string describe_call(const DumpEntry& e);

}  // namespace herd::comm
