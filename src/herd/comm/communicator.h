// Communicator: the only door from one rank to the others.
//
// A Communicator is one rank's view of a group (the world, or a sub-group built from a list of
// global ranks such as ParallelDims::group(rank, Dim::kDP)). It offers all-reduce, all-gather,
// reduce-scatter, broadcast, barrier, send and recv on raw buffers, each asynchronous (i-prefixed,
// returning a Handle to wait on) and blocking (the same call followed by wait). Semantics:
//
//   - Collectives are matched by order: every member issues the same collectives, with the same
//     element type, count, reduction and root, in the same order. Each group numbers its collectives
//     (seq 0, 1, 2, ...) independently of every other group, so TP, CP, PP and DP traffic interleave
//     freely. Point-to-point ops are matched by (source, destination, tag) in posting order.
//   - Buffers handed to an async op belong to the communicator until its wait returns: do not write
//     the send buffer or read the receive buffer before then.
//   - In-place: all_reduce with send == recv; all_gather with send == recv + rank * count;
//     reduce_scatter with recv == send + rank * count.
//   - Ranks in calls (peer, root) are group ranks, 0 .. size()-1; reductions run in group-rank order.
//   - Every wait has a deadline (CommOptions::timeout_s). A hang, a peer that died or a mismatched
//     call ends in an error that names the group, the op, its sequence number and the ranks that
//     were missing, and the flight recorder is dumped; a failed communicator stays failed.
//
// Backends implement post() and new_group(); this base class validates arguments, numbers the ops
// and records them in the flight recorder, so every backend reports the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "herd/comm/flight_recorder.h"
#include "herd/comm/types.h"
#include "herd/core/error.h"
#include "herd/topology/parallel_dims.h"

namespace herd::comm {

// One posted operation, as the backend sees it. `peer` is the p2p peer or the broadcast root.
struct OpDesc {
  OpKind kind = OpKind::kBarrier;
  DType elem = DType::kF32;
  std::size_t count = 0;  // elements per rank (all_gather: sent; reduce_scatter: received)
  ReduceOp reduce = ReduceOp::kSum;
  const void* send = nullptr;
  void* recv = nullptr;
  int peer = -1;
  int tag = -1;
  std::uint64_t seq = 0;
  std::uint64_t record_id = 0;
};

// Completion of one posted op. test() advances it without blocking; wait() blocks until it is done
// or failed, at most the communicator's timeout. Both may be called again after completion.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool test() = 0;
  virtual Status wait() = 0;
};

// A failed-before-posting op (bad arguments, or the communicator already failed).
class FailedWork final : public Work {
 public:
  explicit FailedWork(Status s) : status_(std::move(s)) {}
  bool test() override { return true; }
  Status wait() override { return status_; }

 private:
  Status status_;
};

class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<Work> w) : w_(std::move(w)) {}
  bool valid() const { return w_ != nullptr; }
  Status wait() { return w_ ? w_->wait() : Status::Ok(); }
  bool test() { return w_ ? w_->test() : true; }

 private:
  std::shared_ptr<Work> w_;
};

// Waits for every handle, returning the first error (all are waited on regardless).
Status wait_all(std::vector<Handle>& handles);

class Communicator {
 public:
  struct Identity {
    std::string name;           // "world", "tp", "dp", ...
    std::int64_t group_id = 0;  // unique per group within the job
    std::vector<int> members;   // global ranks, in group-rank order
    int global_rank = 0;
  };
  Communicator(Identity id, std::shared_ptr<FlightRecorder> recorder, CommOptions options);
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(id_.members.size()); }
  int global_rank() const { return id_.global_rank; }
  const std::vector<int>& members() const { return id_.members; }
  const std::string& name() const { return id_.name; }
  std::int64_t group_id() const { return id_.group_id; }
  const CommOptions& options() const { return options_; }
  FlightRecorder& recorder() { return *recorder_; }
  std::shared_ptr<FlightRecorder> recorder_ptr() const { return recorder_; }
  std::string describe() const;  // "group 'dp' (global ranks 1,3,5,7)"
  virtual const char* backend() const = 0;

  // recv = op over ranks of send, elementwise; count elements each.
  Handle iall_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op);
  // recv (size() * count) = the concatenation of every rank's send (count), in rank order.
  Handle iall_gather(const void* send, void* recv, std::size_t count, DType t);
  // recv (count) = chunk `rank()` of op over ranks of send (size() * count).
  Handle ireduce_scatter(const void* send, void* recv, std::size_t count, DType t, ReduceOp op);
  // buf (count) on every rank = buf on `root`.
  Handle ibroadcast(void* buf, std::size_t count, DType t, int root);
  // Point-to-point to/from group rank `peer`; tag >= 0. A send completes when the matching recv has
  // taken the data (local backend) or MPI says the buffer is free (mpi backend).
  Handle isend(const void* buf, std::size_t count, DType t, int peer, int tag);
  Handle irecv(void* buf, std::size_t count, DType t, int peer, int tag);
  Handle ibarrier();

  Status all_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
    return iall_reduce(send, recv, count, t, op).wait();
  }
  Status all_reduce(void* buf, std::size_t count, DType t, ReduceOp op) {
    return iall_reduce(buf, buf, count, t, op).wait();
  }
  Status all_gather(const void* send, void* recv, std::size_t count, DType t) {
    return iall_gather(send, recv, count, t).wait();
  }
  Status reduce_scatter(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
    return ireduce_scatter(send, recv, count, t, op).wait();
  }
  Status broadcast(void* buf, std::size_t count, DType t, int root) { return ibroadcast(buf, count, t, root).wait(); }
  Status send(const void* buf, std::size_t count, DType t, int peer, int tag) {
    return isend(buf, count, t, peer, tag).wait();
  }
  Status recv(void* buf, std::size_t count, DType t, int peer, int tag) {
    return irecv(buf, count, t, peer, tag).wait();
  }
  Status barrier() { return ibarrier().wait(); }

  // Typed conveniences: T is float, double, int32_t or int64_t.
  template <typename T>
  Status all_reduce(T* buf, std::size_t count, ReduceOp op) {
    return all_reduce(buf, count, dtype_of<T>(), op);
  }

  // A sub-group of this communicator's members, given by global ranks in the order that defines
  // group ranks (and so the reduction order). Only the members call it, each with the same list and
  // name; groups must be created in the same order on every rank (as with MPI). Errors name the
  // offending rank list.
  virtual Result<std::unique_ptr<Communicator>> new_group(const std::vector<std::int64_t>& global_ranks,
                                                          const std::string& name) = 0;
  // The group of this rank along `dims` of the mesh, named after them ("tp", "dp", "cp+dp").
  Result<std::unique_ptr<Communicator>> new_group(const topology::ParallelDims& dims,
                                                  std::initializer_list<topology::Dim> along);

 protected:
  // Posts a validated op (seq and record_id set). The backend updates the record's state.
  virtual std::shared_ptr<Work> post(const OpDesc& op) = 0;
  // Common argument checks for new_group: unique, in this group, containing this rank.
  Status check_group_ranks(const std::vector<std::int64_t>& global_ranks, const std::string& name) const;

 private:
  Handle submit(OpDesc op);

  Identity id_;
  int rank_ = 0;
  std::shared_ptr<FlightRecorder> recorder_;
  CommOptions options_;
  std::uint64_t coll_seq_ = 0;
  std::uint64_t p2p_seq_ = 0;
};

// "0,1,2": a rank list for error messages, comma-separated without spaces.
std::string rank_list(const std::vector<int>& global_ranks);

// An op as the process backends' errors name it: "all_reduce #1 on group 'world' (global ranks 0,1,2),
// fp64 x 1000", with " tag T" for send and recv.
std::string describe_op(const OpDesc& op, const std::string& group, const std::vector<int>& members);

}  // namespace herd::comm
