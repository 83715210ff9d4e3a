// CheckpointWriter: one rank's checkpoint saves, asynchronous by default (checkpoint.async).
//
// At a checkpoint step the trainer copies the rank's pieces (weights and both AdamW moments) into a
// host snapshot (checkpoint.h: snapshot_pieces) and hands it to start(); the snapshot is then written by
// a background thread while the next steps run, so the save's critical path is the copy (and waiting for
// the previous write, at most one being in flight). The thread issues no collective: every rank's
// thread makes the temporary directory if it is not there yet, writes its shard and publishes its index
// (or, when its write failed, a note with the error), and rank 0's thread waits for every index (up to
// the collective timeout), merges the manifest and renames the directory into place (checkpoint.h:
// commit_checkpoint). After a failed save rank 0 removes the temporary directory once every rank is done
// with it, so a disk that filled up does not stay full and the previous checkpoint stays as it was.
//
// The outcome reaches the trainer at a later step boundary through poll() (each rank knows its own part;
// the trainer spreads a failure to every rank in its per-step control all-reduce), and wait() at the
// end of the run or before a preempted job exits. In synchronous mode start() does the same work on the
// calling thread, so the files are identical either way.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "herd/core/error.h"
#include "herd/train/checkpoint/checkpoint.h"

namespace herd::train {

class CheckpointWriter {
 public:
  struct Options {
    std::string dir;
    int rank = 0;
    int world_size = 1;
    std::int64_t keep = 2;
    double timeout_s = 300;  // how long rank 0 waits for every rank's shard
    bool async = true;
  };
  struct Outcome {
    std::int64_t step = 0;
    Status status;
  };

  explicit CheckpointWriter(Options o) : opt_(std::move(o)) {}
  ~CheckpointWriter();  // cancels a write still waiting for other ranks, then joins
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // The snapshot buffer of the next save (reused across saves); fill it with snapshot_pieces only after
  // wait_idle(), since the previous write may still be reading it.
  ShardSnapshot& buffer() { return snap_; }
  // Waits for the write in flight (if any); its outcome stays pending for poll().
  void wait_idle();
  // Starts saving `step` from buffer(). fail_disk_full: the shard write fails as a full disk would
  // (fault.fail_checkpoint_step).
  void start(std::int64_t step, Json meta, Json layout, bool fail_disk_full);
  // The outcome of a finished write not yet reported; nullopt when none is finished or none was started.
  std::optional<Outcome> poll();
  // Waits for the write in flight and returns its outcome when it was not reported yet.
  std::optional<Outcome> wait();
  // Whether a write was started and not joined yet.
  bool busy() const { return thread_.joinable(); }

 private:
  Status write(std::int64_t step, const Json& meta, const Json& layout, bool fail_disk_full);

  Options opt_;
  ShardSnapshot snap_;
  std::thread thread_;
  std::atomic<bool> cancel_{false};
  std::atomic<bool> finished_{false};
  std::mutex mu_;
  std::optional<Outcome> pending_;  // guarded by mu_
};

}  // namespace herd::train
