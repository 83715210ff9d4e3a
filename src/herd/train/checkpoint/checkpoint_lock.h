// A job owns its checkpoint directory: one job at a time writes, prunes and resumes from it.
//
// The owner holds an exclusive flock on DIR/.herd.lock, which names it (one line of JSON: command, pid,
// host, since). The kernel releases the lock when the holder's file is closed or its process ends in any
// way, kill -9 included, so a crashed job never leaves the directory locked; the file itself stays and
// is overwritten by the next owner. A second job on the same directory is refused before it touches
// anything in it: "checkpoint.dir 'X' is in use by herd train pid N on host H since T; stop that job or
// choose another checkpoint.dir".
//
// One lock per job: rank 0 takes it (the thread that is rank 0 under the local backend, the process of
// rank 0 under MPI). A supervisor (herd train --max-restarts, herd launch) takes it for the whole job,
// across its restarts; its child and the child's ranks find the lock held by a process they descend from
// on the same host and train under their supervisor's ownership, holding nothing themselves.
#pragma once

#include <string>

#include "herd/core/error.h"

namespace herd::train {

class CheckpointDirLock {
 public:
  static constexpr const char* kFileName = ".herd.lock";

  // Takes DIR/.herd.lock (creating DIR when missing) for `command` ("herd train", "herd launch"), without
  // waiting. When a process this one descends from holds it, the result holds nothing (held() is false)
  // and the caller goes on as that process's job. Errors: the directory cannot be created or the lock
  // file opened (naming the path and the errno text), or another job holds it (naming that job).
  static Result<CheckpointDirLock> acquire(const std::string& dir, const std::string& command);

  CheckpointDirLock() = default;
  CheckpointDirLock(CheckpointDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  CheckpointDirLock& operator=(CheckpointDirLock&& o) noexcept;
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  ~CheckpointDirLock();

  bool held() const { return fd_ >= 0; }

 private:
  explicit CheckpointDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace herd::train
