// Argument checks, sequence numbering and flight recording shared by every backend.
#include "herd/comm/communicator.h"

#include <algorithm>
#include <set>

namespace herd::comm {

Status wait_all(std::vector<Handle>& handles) {
  Status first;
  for (Handle& h : handles) {
    Status s = h.wait();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

std::string rank_list(const std::vector<int>& global_ranks) {
  std::string out;
  for (std::size_t i = 0; i < global_ranks.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(global_ranks[i]);
  }
  return out;
}

std::string describe_op(const OpDesc& op, const std::string& group, const std::vector<int>& members) {
  std::string s = std::string(op_name(op.kind)) + " #" + std::to_string(op.seq) + " on group '" + group +
                  "' (global ranks " + rank_list(members) + ")";
  if (op.kind != OpKind::kBarrier) s += ", " + std::string(dtype_name(op.elem)) + " x " + std::to_string(op.count);
  if (!is_collective(op.kind)) s += " tag " + std::to_string(op.tag);
  return s;
}

Communicator::Communicator(Identity id, std::shared_ptr<FlightRecorder> recorder, CommOptions options)
    : id_(std::move(id)), recorder_(std::move(recorder)), options_(std::move(options)) {
  auto it = std::find(id_.members.begin(), id_.members.end(), id_.global_rank);
  HERD_CHECK(it != id_.members.end(), "rank ", id_.global_rank, " is not a member of group '", id_.name, "'");
  rank_ = static_cast<int>(it - id_.members.begin());
  HERD_CHECK(recorder_ != nullptr, "communicator without a flight recorder");
  recorder_->note_group(id_.group_id, id_.name, id_.members);
}

std::string Communicator::describe() const {
  return "group '" + id_.name + "' (global ranks " + rank_list(id_.members) + ")";
}

Handle Communicator::iall_reduce(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
  OpDesc d;
  d.kind = OpKind::kAllReduce, d.elem = t, d.count = count, d.reduce = op, d.send = send, d.recv = recv;
  return submit(d);
}

Handle Communicator::iall_gather(const void* send, void* recv, std::size_t count, DType t) {
  OpDesc d;
  d.kind = OpKind::kAllGather, d.elem = t, d.count = count, d.send = send, d.recv = recv;
  return submit(d);
}

Handle Communicator::ireduce_scatter(const void* send, void* recv, std::size_t count, DType t, ReduceOp op) {
  OpDesc d;
  d.kind = OpKind::kReduceScatter, d.elem = t, d.count = count, d.reduce = op, d.send = send, d.recv = recv;
  return submit(d);
}

Handle Communicator::ibroadcast(void* buf, std::size_t count, DType t, int root) {
  OpDesc d;
  d.kind = OpKind::kBroadcast, d.elem = t, d.count = count, d.send = buf, d.recv = buf, d.peer = root;
  return submit(d);
}

Handle Communicator::isend(const void* buf, std::size_t count, DType t, int peer, int tag) {
  OpDesc d;
  d.kind = OpKind::kSend, d.elem = t, d.count = count, d.send = buf, d.peer = peer, d.tag = tag;
  return submit(d);
}

Handle Communicator::irecv(void* buf, std::size_t count, DType t, int peer, int tag) {
  OpDesc d;
  d.kind = OpKind::kRecv, d.elem = t, d.count = count, d.recv = buf, d.peer = peer, d.tag = tag;
  return submit(d);
}

Handle Communicator::ibarrier() {
  OpDesc d;
  d.kind = OpKind::kBarrier;
  return submit(d);
}

Handle Communicator::submit(OpDesc d) {
  const std::string what = std::string(op_name(d.kind)) + " on " + describe();
  auto fail = [&](const std::string& msg) { return Handle(std::make_shared<FailedWork>(make_error(what, ": ", msg))); };
  if ((d.kind == OpKind::kAllReduce || d.kind == OpKind::kReduceScatter) && !is_reducible(d.elem)) {
    return fail(std::string("dtype ") + dtype_name(d.elem) +
                " cannot be reduced; reduce in fp32 or fp64 (or i32/i64 for counts)");
  }
  if (d.kind == OpKind::kSend || d.kind == OpKind::kRecv) {
    if (d.peer < 0 || d.peer >= size() || d.peer == rank_) {
      return fail("peer " + std::to_string(d.peer) + " must be another group rank in [0, " + std::to_string(size()) +
                  ") (this rank is " + std::to_string(rank_) + ")");
    }
    if (d.tag < 0) return fail("tag " + std::to_string(d.tag) + " must be >= 0");
  }
  if (d.kind == OpKind::kBroadcast && (d.peer < 0 || d.peer >= size())) {
    return fail("root " + std::to_string(d.peer) + " must be a group rank in [0, " + std::to_string(size()) + ")");
  }
  if (d.count > 0 && d.kind != OpKind::kBarrier &&
      ((d.kind != OpKind::kRecv && d.send == nullptr) || (d.kind != OpKind::kSend && d.recv == nullptr))) {
    return fail("null buffer for " + std::to_string(d.count) + " elements");
  }
  d.seq = is_collective(d.kind) ? coll_seq_++ : p2p_seq_++;
  RecordEntry e;
  e.seq = d.seq;
  e.group = id_.name;
  e.group_id = id_.group_id;
  e.op = d.kind;
  e.elem = d.elem;
  e.count = d.count;
  e.reduce = d.reduce;
  e.peer = d.peer;
  e.tag = d.tag;
  d.record_id = recorder_->record(std::move(e));
  return Handle(post(d));
}

Status Communicator::check_group_ranks(const std::vector<std::int64_t>& global_ranks, const std::string& name) const {
  std::string list = "new_group '" + name + "' [";
  for (std::size_t i = 0; i < global_ranks.size(); ++i) {
    if (i > 0) list += ',';
    list += std::to_string(global_ranks[i]);
  }
  list += ']';
  if (global_ranks.empty()) return make_error(list, ": a group needs at least one rank");
  std::set<std::int64_t> seen;
  bool has_self = false;
  for (std::int64_t r : global_ranks) {
    if (!seen.insert(r).second) return make_error(list, ": rank ", r, " is listed twice");
    if (std::find(id_.members.begin(), id_.members.end(), r) == id_.members.end()) {
      return make_error(list, ": rank ", r, " is not in ", describe());
    }
    has_self |= r == id_.global_rank;
  }
  if (!has_self) {
    return make_error(list, ": the calling rank ", id_.global_rank, " is not in the list; only members create a group");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Communicator>> Communicator::new_group(const topology::ParallelDims& dims,
                                                              std::initializer_list<topology::Dim> along) {
  bool is_world = dims.world() == static_cast<std::int64_t>(size());
  for (int i = 0; is_world && i < size(); ++i) is_world = id_.members[i] == i;
  if (!is_world) {
    return make_error("new_group: ", dims.to_string(), " does not describe ", describe(),
                      "; split the world communicator");
  }
  std::string name;
  for (topology::Dim d : along) {
    if (!name.empty()) name.push_back('+');
    name.append(topology::dim_name(d));
  }
  return new_group(dims.group(id_.global_rank, along), name);
}

}  // namespace herd::comm
