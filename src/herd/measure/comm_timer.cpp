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
  explicit Span(Totals& t) : t_(t), clock0_(thread_clock()) {}
  ~Span() {
    const ThreadClock now = thread_clock();
    t_.wall_s += wall_.seconds();
    t_.cpu_s += now.cpu_s - clock0_.cpu_s;
    t_.queued_s += now.queued_s - clock0_.queued_s;
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Totals& t_;
  Timer wall_;
  ThreadClock clock0_;
};

class TimedWork final : public comm::Work {
 public:
  TimedWork(comm::Handle h, std::shared_ptr<Totals> totals) : h_(std::move(h)), totals_(std::move(totals)) {}
  bool test() override {
    Span s(*totals_);
    return h_.test();
  }
  Status wait() override {
    Span s(*totals_);
    return h_.wait();
  }

 private:
  comm::Handle h_;
  std::shared_ptr<Totals> totals_;
};

}  // namespace

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
      totals_(std::move(totals)) {}

Result<std::unique_ptr<comm::Communicator>> TimedCommunicator::new_group(const std::vector<std::int64_t>& global_ranks,
                                                                         const std::string& name) {
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> g, inner_->new_group(global_ranks, name));
  return std::unique_ptr<comm::Communicator>(new TimedCommunicator(std::move(g), totals_));
}

std::shared_ptr<comm::Work> TimedCommunicator::post(const comm::OpDesc& op) {
  // Posting counts too: a backend may move data there (the local one advances pending ops whenever
  // a rank is inside the communicator).
  comm::Handle h;
  Span span(*totals_);
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
  return std::make_shared<TimedWork>(std::move(h), totals_);
}

}  // namespace herd::measure
