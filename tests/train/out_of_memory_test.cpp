// A rank whose allocation fails is one error naming the rank, the bytes asked for and the planner's
// estimate of the layout, not an abort, and not its peer's "rank 1 exited" (the victim's view). The
// failing rank asks aligned_array for 2^61 + 1 floats, a real request the allocator layer refuses
// (core/aligned.h), on one rank of a DP2 job whose other rank trains normally.
#include "herd/train/step/out_of_memory.h"

#include <gtest/gtest.h>

#include "herd/core/aligned.h"
#include "train/dist_harness.h"

namespace herd::train {
namespace {

using testing::parity_config;
using testing::parity_docs;
using testing::parity_model;

// Rank bad_rank asks for 2^61 + 1 floats where the launcher hands it its step clock, inside the rank's
// guarded region after its model and trainer are built; the other rank goes on into the first step.
std::unique_ptr<StepClock> failing_on_rank(int rank, int bad_rank) {
  if (rank == bad_rank) {
    AlignedPtr<float> huge = aligned_array<float>((std::size_t{1} << 61) + 1);
    ADD_FAILURE() << "the allocation of 2^63 bytes succeeded";
  }
  return nullptr;
}

TEST(OutOfMemory, TheRankThatRanOutIsNamedWithTheBytesAndThePlan) {
  TrainConfig c = parity_config(3);
  testing::set_layout(c, 1, 1, 1, 2);
  for (int bad : {1, 0}) {
    JobResult<float> out;
    out.step_clock = [bad](int rank) { return failing_on_rank(rank, bad); };
    const Status s = run_local_job<float>(c, parity_model(), {parity_docs(40, 7), nullptr}, &out);
    ASSERT_FALSE(s.ok());
    const std::string& m = s.error().message();
    EXPECT_EQ(m.rfind("rank " + std::to_string(bad) + ": out of memory: an allocation of 8192.0 PiB (" +
                          std::to_string((std::size_t{1} << 63) + 4) + " bytes) failed; the planner estimates ",
                      0),
              0u)
        << m;
    EXPECT_NE(m.find(" per rank for this layout ("), std::string::npos) << m;
    EXPECT_NE(m.find(" for its 2 ranks) and this host has "), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(OutOfMemory, ARunWithinTheHostsMemoryPassesTheCheck) {
  TrainConfig c = parity_config(3);
  EXPECT_TRUE(check_host_memory(c, parity_model(), 1).ok());
  c.parallel.microbatch = std::int64_t{1} << 36;
  c.train.global_batch = std::int64_t{1} << 36;
  const Status s = check_host_memory(c, parity_model(), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("beyond this host's"), std::string::npos) << s.error().message();
}

}  // namespace
}  // namespace herd::train
