// The timed communicator counts the time a rank spends blocked: rank 0 waits for a rank that arrives
// 100 ms late, in the world and in a group split from it, and the counter sees both waits.
#include "herd/measure/comm_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "herd/comm/local/local_world.h"

namespace herd::measure {
namespace {

TEST(TimedCommunicator, CountsTheWaitForALatePeerInTheWorldAndItsGroups) {
  comm::CommOptions o;
  o.timeout_s = 30;
  comm::LocalWorld world(2, o);
  double waited = -1, before_group = -1;
  const Status s = comm::first_error(world.run([&](comm::Communicator& c) -> Status {
    TimedCommunicator timed(c);
    if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    HERD_RETURN_IF_ERROR(timed.barrier());
    if (c.rank() == 0) before_group = timed.wait_seconds();
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> g, timed.new_group({0, 1}, "pair"));
    if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    float x = 1.0f, y = 0.0f;
    HERD_RETURN_IF_ERROR(g->all_reduce(&x, &y, 1, DType::kF32, comm::ReduceOp::kSum));
    if (y != 2.0f) return make_error("all_reduce through the timed group gave ", y, ", expected 2");
    if (c.rank() == 0) waited = timed.wait_seconds();
    return Status::Ok();
  }));
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_GE(before_group, 0.08);
  EXPECT_LT(before_group, 5.0);
  EXPECT_GE(waited - before_group, 0.08);  // the group shares the world's counter
}

}  // namespace
}  // namespace herd::measure
