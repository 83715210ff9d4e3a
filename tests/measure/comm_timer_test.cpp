// The timed communicator counts the time a rank spends blocked: rank 0 waits for a rank that arrives
// 100 ms late, in the world and in a group split from it, and the counter sees both waits. It counts the
// thread's CPU time inside apart: a blocked wait costs wall time and next to no CPU, while the CPU the
// rank spends reducing a large buffer inside the call is counted (the straggler watch's busy time is the
// step's CPU time less this).
#include "herd/measure/comm_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "herd/comm/local/local_world.h"
#include "herd/measure/timing.h"

namespace herd::measure {
namespace {

// Blocks until `rank`'s newest recorded call is `op` in the group `group`: the rank is inside it (its
// timer runs from before the record), however the threads are scheduled. A peer that sleeps after this
// makes the rank wait at least that long.
// (Capped at the collectives' 30 s timeout, after which the rank has failed anyway.)
void wait_until_inside(const comm::LocalWorld& world, int rank, comm::OpKind op, const std::string& group) {
  for (int i = 0; i < 30000; ++i) {
    const std::vector<comm::RecordEntry> e = world.recorder(rank)->entries();
    if (!e.empty() && e.back().op == op && e.back().group == group) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(TimedCommunicator, CountsTheWaitForALatePeerInTheWorldAndItsGroups) {
  comm::CommOptions o;
  o.timeout_s = 30;
  comm::LocalWorld world(2, o);
  double waited = -1, before_group = -1;
  const Status s = comm::first_error(world.run([&](comm::Communicator& c) -> Status {
    TimedCommunicator timed(c);
    if (c.rank() == 1) {
      wait_until_inside(world, 0, comm::OpKind::kBarrier, c.name());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    HERD_RETURN_IF_ERROR(timed.barrier());
    if (c.rank() == 0) before_group = timed.wait_seconds();
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> g, timed.new_group({0, 1}, "pair"));
    if (c.rank() == 1) {
      wait_until_inside(world, 0, comm::OpKind::kAllReduce, g->name());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    float x = 1.0f, y = 0.0f;
    HERD_RETURN_IF_ERROR(g->all_reduce(&x, &y, 1, DType::kF32, comm::ReduceOp::kSum));
    if (y != 2.0f) return make_error("all_reduce through the timed group gave ", y, ", expected 2");
    if (c.rank() == 0) waited = timed.wait_seconds();
    return Status::Ok();
  }));
  ASSERT_TRUE(s.ok()) << s.error().message();
  // Lower bounds only: rank 0 is inside each call while rank 1 sleeps 100 ms; how much longer a loaded
  // host makes it is not the counter's doing.
  EXPECT_GE(before_group, 0.1);
  EXPECT_GE(waited - before_group, 0.1);  // the group shares the world's counter
}

TEST(TimedCommunicator, CountsTheCpuTimeInsideApartFromTheWallTime) {
  comm::CommOptions o;
  o.timeout_s = 30;
  comm::LocalWorld world(2, o);
  double blocked_wall = -1, blocked_cpu = -1, reduce_cpu = -1, cpu_outside = -1;
  const Status s = comm::first_error(world.run([&](comm::Communicator& c) -> Status {
    TimedCommunicator timed(c);
    if (c.rank() == 1) {
      wait_until_inside(world, 0, comm::OpKind::kBarrier, c.name());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    HERD_RETURN_IF_ERROR(timed.barrier());
    if (c.rank() == 0) {
      blocked_wall = timed.wait_seconds();
      blocked_cpu = timed.totals().cpu_s;
    }
    // 64 MiB summed: the local backend copies and adds on the ranks' own threads, inside the call.
    std::vector<float> x(16u << 20, 1.0f), y(x.size());
    const double cpu0 = thread_cpu_seconds(), inside0 = timed.totals().cpu_s;
    for (int i = 0; i < 3; ++i) {
      HERD_RETURN_IF_ERROR(timed.all_reduce(x.data(), y.data(), x.size(), DType::kF32, comm::ReduceOp::kSum));
    }
    if (y.back() != 2.0f) return make_error("all_reduce gave ", y.back(), ", expected 2");
    if (c.rank() == 0) {
      reduce_cpu = timed.totals().cpu_s - inside0;
      cpu_outside = (thread_cpu_seconds() - cpu0) - reduce_cpu;
    }
    return Status::Ok();
  }));
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_GE(blocked_wall, 0.2);
  EXPECT_LT(blocked_cpu, 0.5 * blocked_wall) << "a blocked wait is counted as CPU time";
  EXPECT_GT(reduce_cpu, 0.0);
  // Everything this thread ran between the two clock readings was inside the calls.
  EXPECT_LT(cpu_outside, 0.25 * reduce_cpu + 0.005) << "CPU inside " << reduce_cpu << " s";
}

}  // namespace
}  // namespace herd::measure
