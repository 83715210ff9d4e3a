// TimedCommunicator: forwarding with the time spent in wait() added to a shared counter.
#include "herd/measure/comm_timer.h"

#include "herd/core/timer.h"

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

class TimedWork final : public comm::Work {
 public:
  TimedWork(comm::Handle h, std::shared_ptr<double> seconds) : h_(std::move(h)), seconds_(std::move(seconds)) {}
  bool test() override {
    Timer t;
    const bool done = h_.test();
    *seconds_ += t.seconds();
    return done;
  }
  Status wait() override {
    Timer t;
    Status s = h_.wait();
    *seconds_ += t.seconds();
    return s;
  }

 private:
  comm::Handle h_;
  std::shared_ptr<double> seconds_;
};

}  // namespace

TimedCommunicator::TimedCommunicator(comm::Communicator& inner)
    : comm::Communicator(identity_of(inner), std::make_shared<comm::FlightRecorder>(inner.global_rank(), 16),
                         inner.options()),
      inner_(&inner),
      seconds_(std::make_shared<double>(0.0)) {}

TimedCommunicator::TimedCommunicator(std::unique_ptr<comm::Communicator> owned, std::shared_ptr<double> counter)
    : comm::Communicator(identity_of(*owned), std::make_shared<comm::FlightRecorder>(owned->global_rank(), 16),
                         owned->options()),
      owned_(std::move(owned)),
      inner_(owned_.get()),
      seconds_(std::move(counter)) {}

Result<std::unique_ptr<comm::Communicator>> TimedCommunicator::new_group(const std::vector<std::int64_t>& global_ranks,
                                                                         const std::string& name) {
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> g, inner_->new_group(global_ranks, name));
  return std::unique_ptr<comm::Communicator>(new TimedCommunicator(std::move(g), seconds_));
}

std::shared_ptr<comm::Work> TimedCommunicator::post(const comm::OpDesc& op) {
  // Posting counts too: a backend may move data there (the local one advances pending ops whenever
  // a rank is inside the communicator).
  Timer t;
  comm::Handle h;
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
  *seconds_ += t.seconds();
  return std::make_shared<TimedWork>(std::move(h), seconds_);
}

}  // namespace herd::measure
