// The `local` backend: N ranks as N threads of one process, communicating through shared memory.
//
// It is the default for single-machine runs and the backend every multi-rank unit test uses (ranks
// as threads, as gloo's tests do). A collective is a rendezvous on a slot keyed by the group's
// sequence number: each rank publishes its buffer pointers, then every rank computes its own share
// straight from the others' buffers (all-reduce: rank r reduces chunk r of every input in rank order,
// then gathers the other reduced chunks), so data moves once with no staging copy and each rank only
// ever writes its own buffers. Reductions always run in rank order, so this backend is always
// deterministic. Progress happens while a rank is inside the communicator (posting, testing or
// waiting on any op): a wait advances every op the rank has pending, in every group, which is what
// keeps async ops on different groups from deadlocking.
//
// Faults: every wait has a deadline; on a timeout, a rank that threw, or a rank that exited while
// others still needed it, the world is aborted, every rank's flight recorder is dumped and each rank's
// pending and later ops fail with a message naming the missing ranks.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "herd/comm/communicator.h"

namespace herd::comm {

namespace local_detail {
struct WorldState;
}

class LocalWorld {
 public:
  LocalWorld(int size, CommOptions options);
  ~LocalWorld();
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;

  int size() const;

  // The world communicator of `rank`, for callers that run their own threads: call once per rank and
  // use it (and groups split from it) from one thread. Destroying it waits for the rank's pending ops
  // and marks the rank exited, so peers still waiting for it fail at once instead of timing out.
  std::unique_ptr<Communicator> communicator(int rank);

  // Runs fn(world communicator) on `size` threads, rank r on thread r, and returns each rank's
  // status. An exception escaping fn becomes that rank's error and aborts the world.
  std::vector<Status> run(const std::function<Status(Communicator&)>& fn);

  // Fails every pending and future op of every rank with `reason` and dumps the flight recorders.
  void abort(const std::string& reason);
  bool aborted() const;
  // Dumps every rank's flight recorder with `reason` without stopping anything (a SIGUSR1/SIGUSR2
  // request); returns the files written (dump_paths() lists only the dumps of a failure).
  std::vector<std::string> dump(const std::string& reason);
  // The flight-recorder files written so far (one per rank per failure).
  std::vector<std::string> dump_paths() const;
  // Rank `rank`'s flight recorder, which is also its heartbeat (train/job/watchdog.h reads it).
  std::shared_ptr<FlightRecorder> recorder(int rank) const;

 private:
  std::shared_ptr<local_detail::WorldState> state_;
};

// The first failed status of a run, prefixed with its rank ("rank 2: ..."), or Ok.
Status first_error(const std::vector<Status>& statuses);

}  // namespace herd::comm
