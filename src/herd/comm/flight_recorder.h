// Flight recorder: the last N communication calls of one rank, kept so a hang can be diagnosed.
//
// Every call through a Communicator appends an entry (sequence number within its group, group name
// and id, op, element type, count, reduction, peer and tag for point-to-point) when it is posted and
// updates its state as it starts, completes, fails or times out, with steady-clock times relative to
// the recorder's creation. The buffer is a ring: old entries are overwritten, so it costs a fixed few
// hundred KiB however long the job runs. On a timeout or a failed peer the backend dumps it as JSON
// (one file per rank), which is what tells you that rank 3 is still in all_reduce #41 of group 'dp'
// while everyone else has moved on (the same idea as PyTorch's NCCL flight recorder).
//
// The recorder is also the rank's heartbeat: every record and state change, and every beat() (the
// trainer beats at each step), stamps the time of the rank's last sign of life, which the watchdog
// (train/job/watchdog.h) reads from another thread. Dumps are written atomically (a temporary file renamed
// into place), so a reader never sees half a dump.
//
// Each communicator also notes its group (id, name, members as global ranks) here, so a dump says which
// ranks share each group_id: what `herd trace` (comm/trace_analysis.h) needs to tell who never posted.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "herd/comm/types.h"
#include "herd/core/json.h"

namespace herd::comm {

enum class OpState { kScheduled, kStarted, kCompleted, kFailed, kTimedOut };
const char* op_state_name(OpState s);  // "scheduled", "started", "completed", "failed", "timed_out"

struct RecordEntry {
  std::uint64_t id = 0;   // position in the rank's whole history (never reused)
  std::uint64_t seq = 0;  // the op's sequence number within its group (collectives and p2p counted apart)
  std::string group;
  std::int64_t group_id = 0;
  OpKind op = OpKind::kBarrier;
  DType elem = DType::kF32;
  std::size_t count = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int peer = -1;  // group rank of the peer (send/recv) or the root (broadcast); -1 otherwise
  int tag = -1;
  double t_post = 0, t_start = -1, t_end = -1;  // seconds since the recorder was created; -1: not yet
  OpState state = OpState::kScheduled;
};

// A group this rank belongs to, as named in the dump's "groups" table.
struct GroupInfo {
  std::int64_t group_id = 0;
  std::string name;
  std::vector<int> members;  // global ranks, in group-rank order
};

class FlightRecorder {
 public:
  FlightRecorder(int rank, std::size_t capacity);

  // Appends an entry (id and t_post are filled in) and returns its id.
  std::uint64_t record(RecordEntry e);
  // Moves entry `id` to `state`, stamping t_start or t_end; a no-op when the entry was overwritten.
  void set_state(std::uint64_t id, OpState state);

  // The entries still held, oldest first.
  std::vector<RecordEntry> entries() const;
  std::uint64_t total_recorded() const;

  // Notes a group this rank is a member of (again with the same id: ignored).
  void note_group(std::int64_t group_id, const std::string& name, const std::vector<int>& members);
  std::vector<GroupInfo> groups() const;
  int rank() const { return rank_; }

  // A sign of life outside communication (the trainer calls it at each step), and `what` the rank is
  // doing ("step 12"), which a dump and the watchdog report.
  void beat(const std::string& what = "");
  // Seconds since the last record, state change or beat.
  double idle_seconds() const;
  std::string last_activity() const;

  // The trainer's measured step (comm/stragglers.h has the split): its busy seconds (CPU time computing,
  // outside collectives), its wait (wall time) in collectives, and its time off the CPU outside them. The
  // last kStepsKept are dumped as "steps", so `herd trace` can tell a slow rank from the ranks waiting
  // on it (comm/stragglers.h).
  struct StepTimes {
    std::int64_t step = 0;
    double busy_s = 0, wait_s = 0;
    double stall_s = 0, queued_s = 0;  // off the CPU outside collectives: stopped or blocked; waiting for a core
  };
  static constexpr std::size_t kStepsKept = 32;
  void note_step(const StepTimes& t);
  std::vector<StepTimes> steps() const;

  // {"rank", "host", "pid", "reason", "wall_clock_at_creation_ms", "total_recorded", "capacity",
  //  "groups": [{"group_id", "name", "members"}], "steps": [{"step", "busy_s", "wait_s", "stall_s",
  //  "queued_s"}],
  //  "entries": [...]}.
  Json to_json(const std::string& reason) const;
  // Writes to_json to <dir>/herd_flight_<tag>_rank<rank>.json (dir empty: the system temp dir; tag:
  // the job id) through a temporary file and a rename, and returns the path, or an error naming it.
  Result<std::string> dump(const std::string& dir, const std::string& tag, const std::string& reason) const;

 private:
  double now() const;

  int rank_;
  std::size_t capacity_;
  std::chrono::steady_clock::time_point t0_;
  std::int64_t wall_t0_ms_;
  mutable std::mutex mu_;  // the owner thread writes; a dump may come from another thread
  std::vector<RecordEntry> ring_;
  std::uint64_t next_id_ = 0;
  std::atomic<std::int64_t> last_beat_ns_{0};  // steady clock, since t0_
  std::string activity_;                       // guarded by mu_
  std::vector<GroupInfo> groups_;              // guarded by mu_
  std::vector<StepTimes> steps_;               // guarded by mu_; the last kStepsKept, oldest first
};

}  // namespace herd::comm
