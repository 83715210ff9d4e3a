// TimedCommunicator: a Communicator that forwards every op to another one and adds up the wall time
// this rank spends inside the communicator (posting, testing, waiting): the "communication" share
// of a step in the scaling benchmark and the measured "exposed comm" of `herd train`. It adds up the
// calling thread's scheduler clocks there too (measure/thread_clock.h: CPU time, time queued for a
// core), so the trainer can tell what a rank did outside collectives from what its backend did inside:
// the CPU a backend burns while it polls or reduces is not computing (the straggler watch,
// train/step/straggler_monitor.h).
//
// It wraps the world communicator before the axis groups are split from it, and every group it makes
// is wrapped the same way with the same counter, so one number covers TP, DP and every other group.
// Posting counts because a backend may move data there (the local one advances pending ops whenever
// a rank is inside it). The total is the exposed (not overlapped) communication, waiting for slower
// peers included: the quantity that matters for a step's length. The wrapped communicator still does
// the flight recording and timeouts; this layer keeps only a small recorder of its own because the
// base class requires one.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "herd/comm/communicator.h"

namespace herd::measure {

// The groups a rank's time in collectives is told apart by: the mesh's axes (FSDP's group, "dp" or
// "cp+dp", counts as dp), and the rest ("world": the trainer's per-step control all-reduce and loss
// reduction, set-up).
enum class GroupKind { kTp, kCp, kPp, kDp, kOther };
inline constexpr int kGroupKinds = 5;
GroupKind group_kind(const std::string& group_name);
const char* group_kind_name(GroupKind k);  // "tp", "cp", "pp", "dp", "other"

class TimedCommunicator final : public comm::Communicator {
 public:
  // Borrows `inner`, which must outlive this object.
  explicit TimedCommunicator(comm::Communicator& inner);
  // The totals of one rank, shared by the world and every group made from it.
  struct Totals {
    double wall_s = 0;    // wall seconds inside the communicator
    double cpu_s = 0;     // the calling thread's CPU seconds inside it (measure::thread_clock)
    double queued_s = 0;  // its seconds inside it runnable but waiting for a core
    std::array<double, kGroupKinds> wall_by_kind{};  // wall_s split by the group's kind
  };
  TimedCommunicator(std::unique_ptr<comm::Communicator> owned, std::shared_ptr<Totals> totals);

  const char* backend() const override { return inner_->backend(); }
  Result<std::unique_ptr<comm::Communicator>> new_group(const std::vector<std::int64_t>& global_ranks,
                                                        const std::string& name) override;
  using comm::Communicator::new_group;
  double wait_seconds() const { return totals_->wall_s; }
  const Totals& totals() const { return *totals_; }

 protected:
  std::shared_ptr<comm::Work> post(const comm::OpDesc& op) override;

 private:
  std::unique_ptr<comm::Communicator> owned_;
  comm::Communicator* inner_;
  std::shared_ptr<Totals> totals_;
  GroupKind kind_ = GroupKind::kOther;
};

}  // namespace herd::measure
