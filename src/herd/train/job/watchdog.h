// The watchdog: a thread beside the ranks of this process that never lets the job hang.
//
// Every rank's flight recorder is its heartbeat (comm/flight_recorder.h): each communication call and
// each step stamps it. A rank silent for longer than the timeout (parallel.comm_timeout_s) is hung, in a
// collective that will not complete or outside communication (a stuck kernel, a stalled filesystem, the
// injected fault.hang_*). The watchdog then names it, has every live rank's flight recorder dumped (the
// local world's abort; one process's own recorder under MPI) and, when it owns the process (`herd
// train`), ends it with exit status 1 if the ranks have not all returned within a grace period: a thread
// sleeping in a hung call cannot be joined, so without this the process would wait for it forever. The
// same grace applies after a collective's own timeout aborts the world. The launchers watch for silence
// one second past the collectives' timeout, so where a peer waits on the hung rank the collective's
// error (naming the missing ranks) comes first. So a stalled job ends within the timeout + 1 s + the
// grace (1.5 s) + one poll (0.1 s), under the timeout + 5 s the issue asks for.
//
// Before its first step a rank may be silent longer (startup_s: reading and verifying a checkpoint on a
// loaded host takes a while and calls no collective); its peers' collectives still time out as usual.
//
// fitted_comm_timeout() is the default timeout: long enough that no healthy step or checkpoint comes
// near it, short enough that a hang costs little: max(60 s, 20 x the planner's step time + the
// checkpoint's write time).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "herd/comm/flight_recorder.h"
#include "herd/model/config.h"
#include "herd/train/job/config.h"

namespace herd::train {

struct WatchdogOptions {
  double timeout_s = 300;     // a rank silent this long is hung
  double grace_s = 1.5;       // after a failure, how long the ranks get to return before the process ends
  double poll_s = 0.1;        // how often the heartbeats are read
  double startup_s = 120;     // the silence allowed before a rank's first step (resume, first plan), if longer
  bool exit_process = false;  // end the process when ranks do not return (only where it owns the process)
  // When set, called from the watchdog's thread with a reason when SIGUSR1 or SIGUSR2 asks for the flight
  // recorders (preempt.h): it dumps them, hung ranks included, without stopping the job.
  std::function<void(const std::string&)> on_dump;
};

class Watchdog {
 public:
  // recorders[i] is the heartbeat of global rank first_rank + i. on_stall(reason) is called once, from
  // the watchdog's thread, when a rank goes silent: it aborts the job and dumps the flight recorders.
  // aborted() says whether the job has already failed another way (a collective's timeout).
  Watchdog(std::vector<std::shared_ptr<comm::FlightRecorder>> recorders, int first_rank, WatchdogOptions options,
           std::function<void(const std::string&)> on_stall, std::function<bool()> aborted);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Rank first_rank + i has returned: it is no longer watched.
  void rank_done(int i);
  // The reason given to on_stall, or "" when the watchdog has not fired.
  std::string fired() const;

 private:
  void loop();
  // Calls options.on_dump when a dump was requested since `seen` (preempt.h), and updates `seen`.
  void serve_dump_request(unsigned& seen);

  std::vector<std::shared_ptr<comm::FlightRecorder>> recorders_;
  int first_rank_;
  WatchdogOptions opts_;
  std::function<void(const std::string&)> on_stall_;
  std::function<bool()> aborted_;
  std::vector<std::atomic<bool>> done_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string fired_;
  std::thread thread_;
};

// parallel.comm_timeout_s when set (> 0), else max(60 s, 20 x the planner's projected step time + the
// time to write one checkpoint of the job (parameters and AdamW moments, fp32, at ~200 MB/s)).
// `why` receives how the value was chosen, for the log.
double fitted_comm_timeout(const TrainConfig& cfg, const model::LlamaConfig& m, std::string* why = nullptr);

// The config with parallel.comm_timeout_s resolved (fitted when 0), logged once when `log`.
TrainConfig with_comm_timeout(const TrainConfig& cfg, const model::LlamaConfig& m, bool log);

}  // namespace herd::train
