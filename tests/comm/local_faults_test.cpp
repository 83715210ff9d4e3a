// Faults in the local backend: a rank that stalls, throws, exits early or posts the wrong op makes
// the others stop with an error that names it, and the flight recorders are dumped. Nothing hangs.
#include <chrono>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "comm/comm_test_util.h"
#include "herd/core/json.h"
#include "herd/core/timer.h"

namespace herd::comm {
namespace {

bool contains(const Status& s, const std::string& text) {
  return !s.ok() && s.error().message().find(text) != std::string::npos;
}

TEST(LocalFaults, StalledRankIsNamedAfterTheTimeoutAndRecordersAreDumped) {
  // Rank 2 stalls outside the communicator for longer than the timeout; the others time out in the
  // all-reduce that needs it. The stalled rank later finds the world aborted.
  LocalWorld world(4, testing::test_options(/*timeout_s=*/1.0));
  std::atomic<bool> release{false};
  auto st = world.run([&](Communicator& c) -> Status {
    double x = 1;
    HERD_RETURN_IF_ERROR(c.all_reduce(&x, 1, ReduceOp::kSum));  // seq 0 completes on every rank
    if (c.rank() == 2) {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Status s = c.all_reduce(&x, 1, ReduceOp::kSum);  // seq 1: rank 2 is missing
    if (c.rank() != 2) release = true;
    return s;
  });
  int named = 0;
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(st[r].ok()) << "rank " << r;
    named += contains(
        st[r], "all_reduce #1 on group 'world' (global ranks 0,1,2,3), fp64 x 1: global ranks 2 had not joined it");
    EXPECT_TRUE(contains(st[r], "flight recorders dumped to")) << st[r].error().message();
  }
  EXPECT_EQ(named, 4) << st[0].error().message();
  // One dump per rank; the stalled rank's shows seq 1 never posted, a waiting rank's shows it timed out.
  const auto paths = world.dump_paths();
  ASSERT_EQ(paths.size(), 4u);
  int timed_out = 0;
  for (const std::string& p : paths) {
    auto doc = read_json_file(p);
    ASSERT_TRUE(doc.ok()) << doc.error().message();
    EXPECT_NE((*doc)["reason"].get<std::string>().find("timeout"), std::string::npos);
    const Json& entries = (*doc)["entries"];
    const int rank = (*doc)["rank"].get<int>();
    ASSERT_GE(entries.size(), 1u);
    EXPECT_EQ(entries[0]["state"], "completed");
    if (rank == 2) {
      EXPECT_EQ(entries.size(), 1u) << "the stalled rank never posted seq 1";
    } else {
      ASSERT_EQ(entries.size(), 2u);
      EXPECT_EQ(entries[1]["seq"], 1);
      EXPECT_EQ(entries[1]["op"], "all_reduce");
      timed_out += entries[1]["state"] == "timed_out";
    }
  }
  EXPECT_GE(timed_out, 1) << "the rank that detected the hang marks its entry timed_out";
}

TEST(LocalFaults, ThrowingRankMakesTheOthersFailFastNotAtTheTimeout) {
  LocalWorld world(4, testing::test_options(/*timeout_s=*/60));
  Timer t;
  auto st = world.run([](Communicator& c) -> Status {
    std::vector<float> v(1000, 1.0f);
    HERD_RETURN_IF_ERROR(c.all_reduce(v.data(), v.size(), ReduceOp::kSum));
    if (c.rank() == 1) throw std::runtime_error("out of memory in layer 3");
    return c.all_reduce(v.data(), v.size(), ReduceOp::kSum);
  });
  EXPECT_LT(t.seconds(), 30.0) << "peers must not wait for the 60 s timeout";
  EXPECT_TRUE(contains(st[1], "uncaught std::runtime_error: out of memory in layer 3"));
  for (int r : {0, 2, 3}) {
    EXPECT_TRUE(contains(st[r], "global rank 1 failed: uncaught std::runtime_error: out of memory in layer 3"))
        << st[r].error().message();
  }
}

// Not every exception is a std::exception: a rank's thread catches whatever its rank throws, fails that
// rank with the exception's type and aborts the world, as for any other (no std::terminate).
TEST(LocalFaults, ARankThatThrowsANonStandardExceptionFailsWithoutAbortingTheProcess) {
  LocalWorld world(2, testing::test_options(/*timeout_s=*/60));
  auto st = world.run([](Communicator& c) -> Status {
    std::vector<float> v(8, 1.0f);
    if (c.rank() == 0) throw 7;
    return c.all_reduce(v.data(), v.size(), ReduceOp::kSum);
  });
  EXPECT_TRUE(contains(st[0], "uncaught exception of type int")) << st[0].error().message();
  EXPECT_TRUE(contains(st[1], "global rank 0 failed: uncaught exception of type int")) << st[1].error().message();
}

TEST(LocalFaults, RankThatExitsEarlyIsNamed) {
  LocalWorld world(3, testing::test_options(/*timeout_s=*/60));
  Timer t;
  auto st = world.run([](Communicator& c) -> Status {
    if (c.rank() == 0) return Status::Ok();  // forgets the collective
    std::int32_t v = 1;
    return c.all_reduce(&v, 1, ReduceOp::kSum);
  });
  EXPECT_LT(t.seconds(), 30.0);
  EXPECT_TRUE(st[0].ok());
  for (int r : {1, 2})
    EXPECT_TRUE(contains(st[r], "global ranks 0 exited without completing it")) << st[r].error().message();
}

TEST(LocalFaults, MismatchedCollectivesAreReportedOnEveryRank) {
  LocalWorld world(3, testing::test_options(/*timeout_s=*/60));
  auto st = world.run([](Communicator& c) -> Status {
    std::vector<float> a(12), b(36);
    if (c.rank() == 1) return c.all_gather(a.data(), b.data(), 12, DType::kF32);
    return c.all_reduce(a.data(), 12, ReduceOp::kSum);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(st[r], "posted all_gather(fp32 x 12)")) << st[r].error().message();
    EXPECT_TRUE(contains(st[r], "all_reduce(fp32 x 12)"));
  }
}

TEST(LocalFaults, UnmatchedReceiveTimesOutNamingTheSender) {
  LocalWorld world(2, testing::test_options(/*timeout_s=*/0.2));
  std::atomic<bool> done{false};
  auto st = world.run([&](Communicator& c) -> Status {
    float x = 0;
    if (c.rank() == 1) {
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return Status::Ok();
    }
    Status s = c.recv(&x, 1, DType::kF32, 1, 42);
    done = true;
    return s;
  });
  EXPECT_TRUE(contains(st[0],
                       "recv #0 on group 'world' (global ranks 0,1), fp32 x 1 from global rank 1 tag 42: "
                       "global ranks 1 had not posted the matching send"))
      << st[0].error().message();
}

TEST(LocalFaults, AbortedWorldFailsLaterCallsAndGroupCreation) {
  LocalWorld world(2, testing::test_options());
  auto st = world.run([&](Communicator& c) -> Status {
    HERD_RETURN_IF_ERROR(c.barrier());
    if (c.rank() == 0) world.abort("operator pressed stop");
    HERD_RETURN_IF_ERROR(c.barrier());  // may or may not complete, depending on timing
    auto g = c.new_group({0, 1}, "late");
    COMM_EXPECT(!g.ok() && g.error().message().find("operator pressed stop") != std::string::npos);
    return Status::Ok();
  });
  for (const Status& s : st) EXPECT_TRUE(s.ok() || contains(s, "operator pressed stop"));
}

}  // namespace
}  // namespace herd::comm
