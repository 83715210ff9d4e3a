#include "herd/kernels/cuda/runtime.h"

#include <gtest/gtest.h>

#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

// The caching rule runs on the host: small requests round to 512 bytes, large ones to 2 MiB.
TEST(CudaAllocatorRule, RoundsRequests) {
  EXPECT_EQ(allocation_size(0), 512u);
  EXPECT_EQ(allocation_size(1), 512u);
  EXPECT_EQ(allocation_size(513), 1024u);
  EXPECT_EQ(allocation_size(1u << 20), 1u << 20);
  EXPECT_EQ(allocation_size((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(allocation_size((2u << 20) + 1), 4u << 20);
}

// Without a GPU the runtime says so instead of failing later.
TEST(CudaRuntime, DeviceCountExplainsAbsence) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) {
    EXPECT_FALSE(why.empty());
  } else {
    EXPECT_FALSE(describe_device(0).empty());
  }
}

// A freed block is reused for the next request of its size class: no second cudaMalloc.
TEST(CudaAllocator, ReusesFreedBlocks) {
  HERD_REQUIRE_GPU();
  release_cached();
  const AllocatorStats before = allocator_stats();
  void* a = device_alloc(3 << 20);
  device_free(a);
  void* b = device_alloc((3 << 20) - 100);
  const AllocatorStats after = allocator_stats();
  EXPECT_EQ(a, b);
  EXPECT_EQ(after.cuda_mallocs - before.cuda_mallocs, 1);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 1);
  EXPECT_GE(after.peak_allocated, std::size_t{4} << 20);
  device_free(b);
  EXPECT_EQ(allocator_stats().allocated, before.allocated);
}

// Host -> device -> host round trip, and an event orders a second stream after the compute stream.
TEST(CudaRuntime, CopiesAndEvents) {
  HERD_REQUIRE_GPU();
  std::vector<float> x = testing::random_vector(1000, 3);
  auto d = testing::upload(x);
  Event start, stop;
  start.record(compute_stream());
  fill_zero(d.data(), d.bytes() / 2);
  stop.record(compute_stream());
  stop.synchronize();
  EXPECT_GE(Event::elapsed_ms(start, stop), 0.0f);
  const std::vector<float> back = testing::download(d);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], i < 500 ? 0.0f : x[i]);
}

}  // namespace
}  // namespace herd::kernels::cuda
