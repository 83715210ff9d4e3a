// Backend names and the LocalWorld entry point for callers that run their own rank threads.
#include "herd/comm/world.h"

#include <gtest/gtest.h>

#include <thread>

#include "comm/comm_test_util.h"

namespace herd::comm {
namespace {

TEST(World, BackendNames) {
  EXPECT_EQ(*parse_backend("local"), Backend::kLocal);
  EXPECT_EQ(*parse_backend("mpi"), Backend::kMpi);
  EXPECT_EQ(*parse_backend("gloo"), Backend::kGloo);
  EXPECT_STREQ(backend_name(Backend::kGloo), "gloo");
  auto bad = parse_backend("nccl");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "comm backend 'nccl' is unknown; use local, mpi or gloo");
}

TEST(World, CallerOwnedThreads) {
  LocalWorld world(3, testing::test_options());
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < 3; ++r) comms.push_back(world.communicator(r));
  EXPECT_EQ(comms[2]->backend(), std::string("local"));
  EXPECT_EQ(comms[2]->describe(), "group 'world' (global ranks 0,1,2)");
  std::vector<double> got(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      double v = r + 1;
      if (comms[r]->all_reduce(&v, 1, ReduceOp::kSum).ok()) got[r] = v;
      comms[r].reset();  // leaving: drains and marks the rank exited
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(got, (std::vector<double>{6, 6, 6}));
}

}  // namespace
}  // namespace herd::comm
