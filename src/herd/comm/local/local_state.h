// Internal state of the local backend, shared by the rank threads of one LocalWorld.
//
// One mutex guards the whole world: group registry, collective slots, point-to-point mailboxes, the
// abort flag and each rank's list of pending ops. Data is never moved under the lock: a rank checks
// a slot under the lock, releases it to copy or reduce (counted in `active`, so an aborting rank can
// wait until nobody still reads its buffers) and takes it again to publish its progress. Each rank
// sleeps on its own condition variable; whoever changes a slot or mailbox wakes the ranks involved.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "herd/comm/communicator.h"
#include "herd/comm/flight_recorder.h"

namespace herd::comm::local_detail {

// Stages of a collective on one rank: 0 posted, 1 arrived (pointers published), 1 + k after work
// phase k. All-reduce has two work phases (reduce own chunk, gather others' chunks), barrier none,
// the rest one. A rank starts phase k once every member has reached stage k.
constexpr int kMaxStage = 4;

struct Arrival {
  OpKind kind = OpKind::kBarrier;
  DType elem = DType::kF32;
  std::size_t count = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int root = -1;
  const void* send = nullptr;
  void* recv = nullptr;
};

struct Slot {
  std::vector<Arrival> arr;         // by group rank
  std::vector<int> stage;           // by group rank
  int reached[kMaxStage + 1] = {};  // reached[k]: members whose stage >= k
  int departed = 0;
};

struct P2PMsg {
  const void* buf = nullptr;
  std::size_t count = 0;
  DType elem = DType::kF32;
  bool done = false;  // the receiver has copied it (or refused it: error)
  std::string error;
};

struct GroupState {
  std::int64_t id = 0;
  std::string name;
  std::vector<int> members;  // global ranks by group rank
  std::map<std::uint64_t, Slot> slots;
  std::map<std::tuple<int, int, int>, std::deque<std::shared_ptr<P2PMsg>>> mail;  // (src, dst, tag)
};

class LocalWork;

struct RankState {
  std::condition_variable cv;
  std::vector<std::shared_ptr<LocalWork>> pending;  // in posting order
  std::shared_ptr<FlightRecorder> recorder;
  bool exited = false;
  bool taken = false;  // its world communicator was handed out
};

struct WorldState {
  WorldState(int n, CommOptions o);

  int size;
  CommOptions opts;
  std::string tag;  // "<pid>_w<k>", names the dump files of this world
  std::mutex mu;
  std::vector<std::unique_ptr<RankState>> ranks;
  bool aborted = false;
  std::string abort_reason;
  int active = 0;  // ranks moving data outside the lock
  std::shared_ptr<GroupState> world_group;
  using GroupKey = std::pair<std::string, std::vector<int>>;
  std::map<GroupKey, std::vector<std::shared_ptr<GroupState>>> groups;  // k-th creation of the same key
  std::map<GroupKey, std::vector<int>> created;                         // creations so far, by global rank
  std::int64_t next_group_id = 1;
  std::vector<std::string> dump_paths;

  void notify(const std::vector<int>& global_ranks);
  void notify_all();
  // Sets the abort flag (first reason wins), dumps every rank's flight recorder, wakes everyone.
  void abort_locked(const std::string& reason);
};

// Whether this rank's buffers of `op` are device memory (CommOptions::device_memory says).
bool on_device(const CommOptions& o, const OpDesc& op);

// Advances every pending op of `global_rank` once, in posting order; drops finished ones. Returns
// whether anything changed. May release and retake the lock.
bool progress_rank(WorldState& w, int global_rank, std::unique_lock<std::mutex>& lk);
// Fails every pending op of `global_rank` with the abort reason and waits until no rank still moves
// data (so the caller's buffers are free when it returns).
void fail_pending(WorldState& w, int global_rank, std::unique_lock<std::mutex>& lk);

class LocalWork final : public Work {
 public:
  LocalWork(std::shared_ptr<WorldState> w, std::shared_ptr<GroupState> g, const OpDesc& op, int group_rank,
            FlightRecorder* recorder);
  bool test() override;
  Status wait() override;

  // Under the lock: publishes this rank's part (arrival in the slot, or the message in the mailbox).
  void post_locked();
  // Under the lock: one non-blocking advance. True when something changed.
  bool step(std::unique_lock<std::mutex>& lk);
  bool done() const { return done_; }
  void finish(Status s, OpState state);
  std::string describe_op() const;
  // Global ranks this op is waiting for, and a sentence on what they have not done.
  std::vector<int> missing(std::string* what) const;

 private:
  int work_phases() const;
  void run_phase(int phase, const std::vector<Arrival>& arr);
  // Data movement: host memcpy and comm/reduce.h, or the device's copies and sums for an op on device
  // buffers (CommOptions::device_memory), which device_done() waits for.
  void copy_bytes(void* dst, const void* src, std::size_t n) const;
  void reduce(const void* const* srcs, int n, void* dst, std::size_t count) const;
  void device_done() const;
  bool step_collective(std::unique_lock<std::mutex>& lk);
  bool step_recv(std::unique_lock<std::mutex>& lk);

  std::shared_ptr<WorldState> w_;
  std::shared_ptr<GroupState> g_;
  OpDesc op_;
  int grank_;
  int global_;
  FlightRecorder* recorder_;
  int stage_ = 0;
  bool done_ = false;
  bool timed_out_ = false;  // this rank's wait hit the deadline (recorded as timed_out, not failed)
  bool device_ = false;     // the op's buffers are device memory (CommOptions::device_memory)
  Status status_;
  std::shared_ptr<P2PMsg> msg_;  // send: the message posted; recv: unused
};

}  // namespace herd::comm::local_detail
