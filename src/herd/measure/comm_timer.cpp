// TimedCommunicator: forwarding with the wall and CPU time spent inside the communicator added to
// shared totals.
#include "herd/measure/comm_timer.h"

#include "herd/core/timer.h"
#include "herd/measure/thread_clock.h"

namespace herd::measure {

namespace {

comm::Communicator::Identity identity_of(const comm::Communicator& c) {
  comm::Communicator::Identity id;
  id.name = c.name();
  id.group_id = c.group_id();
  id.members = c.members();
  id.global_rank = c.global_rank();
  return id;
}

using Totals = TimedCommunicator::Totals;

// Adds the wall time and the thread's clocks of its own lifetime to the totals.
class Span {
 public:
  Span(Totals& t, GroupKind kind) : t_(t), kind_(kind), clock0_(thread_clock()) {}
  ~Span() {
    const ThreadClock now = thread_clock();
    const double wall = wall_.seconds();
    t_.wall_s += wall;
    t_.wall_by_kind[static_cast<std::size_t>(kind_)] += wall;
    t_.cpu_s += now.cpu_s - clock0_.cpu_s;
    t_.queued_s += now.queued_s - clock0_.queued_s;
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Totals& t_;
  GroupKind kind_;
  Timer wall_;
  ThreadClock clock0_;
};

class TimedWork final : public comm::Work {
 public:
  TimedWork(comm::Handle h, std::shared_ptr<Totals> totals, GroupKind kind)
      : h_(std::move(h)), totals_(std::move(totals)), kind_(kind) {}
  bool test() override {
    Span s(*totals_, kind_);
    return h_.test();
  }
  Status wait() override {
    Span s(*totals_, kind_);
    return h_.wait();
  }

 private:
  comm::Handle h_;
  std::shared_ptr<Totals> totals_;
  GroupKind kind_;
};

}  // namespace

GroupKind group_kind(const std::string& name) {
  if (name == "tp") return GroupKind::kTp;
  if (name == "cp") return GroupKind::kCp;
  if (name == "pp") return GroupKind::kPp;
  if (name == "dp" || name == "cp+dp" || name == "dp+cp") return GroupKind::kDp;
  return GroupKind::kOther;
}

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::kTp: return "tp";
    case GroupKind::kCp: return "cp";
    case GroupKind::kPp: return "pp";
    case GroupKind::kDp: return "dp";
    case GroupKind::kOther: return "other";
  }
  return "other";
}

TimedCommunicator::TimedCommunicator(comm::Communicator& inner)
    : comm::Communicator(identity_of(inner), std::make_shared<comm::FlightRecorder>(inner.global_rank(), 16),
                         inner.options()),
      inner_(&inner),
      totals_(std::make_shared<Totals>()) {}

TimedCommunicator::TimedCommunicator(std::unique_ptr<comm::Communicator> owned, std::shared_ptr<Totals> totals)
    : comm::Communicator(identity_of(*owned), std::make_shared<comm::FlightRecorder>(owned->global_rank(), 16),
                         owned->options()),
      owned_(std::move(owned)),
      inner_(owned_.get()),
      totals_(std::move(totals)),
      kind_(group_kind(inner_->name())) {}

Result<std::unique_ptr<comm::Communicator>> TimedCommunicator::new_group(const std::vector<std::int64_t>& global_ranks,
                                                                         const std::string& name) {
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> g, inner_->new_group(global_ranks, name));
  return std::unique_ptr<comm::Communicator>(new TimedCommunicator(std::move(g), totals_));
}

std::shared_ptr<comm::Work> TimedCommunicator::post(const comm::OpDesc& op) {
  // Posting counts too: a backend may move data there (the local one advances pending ops whenever
  // a rank is inside the communicator).
  comm::Handle h;
  Span span(*totals_, kind_);
  switch (op.kind) {
    case comm::OpKind::kAllReduce: h = inner_->iall_reduce(op.send, op.recv, op.count, op.elem, op.reduce); break;
    case comm::OpKind::kAllGather: h = inner_->iall_gather(op.send, op.recv, op.count, op.elem); break;
    case comm::OpKind::kReduceScatter:
      h = inner_->ireduce_scatter(op.send, op.recv, op.count, op.elem, op.reduce);
      break;
    case comm::OpKind::kBroadcast: h = inner_->ibroadcast(op.recv, op.count, op.elem, op.peer); break;
    case comm::OpKind::kSend: h = inner_->isend(op.send, op.count, op.elem, op.peer, op.tag); break;
    case comm::OpKind::kRecv: h = inner_->irecv(op.recv, op.count, op.elem, op.peer, op.tag); break;
    case comm::OpKind::kBarrier: h = inner_->ibarrier(); break;
  }
  return std::make_shared<TimedWork>(std::move(h), totals_, kind_);
}

}  // namespace herd::measure
