// The communicators' device path (comm/device_memory.h) on the CPU: the local backend given device
// memory moves and sums a rank's "device" buffers through it, in rank order, bit for bit what the host
// path computes, and leaves host buffers (the loss sums and flags a GPU rank also hands it) on the host.
// "Device" memory here is host memory that a wrapper claims (the CPU's op interface underneath), which
// is what lets the path the GPU runs take (ranks as threads sharing one GPU) be checked on every machine.
#include "herd/parallel/device_memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <vector>

#include "herd/comm/local/local_world.h"
#include "herd/comm/reduce.h"
#include "herd/kernels/ops.h"

namespace herd::parallel {
namespace {

// Device memory whose "device" is the set of host ranges registered as such, counting each call.
class ClaimedMemory final : public comm::DeviceMemory {
 public:
  ClaimedMemory() : inner_(make_device_memory(kernels::cpu_ops())) {}
  void claim(const void* p, std::size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    ranges_.push_back({static_cast<const char*>(p), bytes});
  }
  bool holds(const void* p) const override {
    std::lock_guard<std::mutex> lk(mu_);
    const auto* c = static_cast<const char*>(p);
    for (const auto& [b, n] : ranges_) {
      if (c >= b && c < b + n) return true;
    }
    return false;
  }
  void copy(void* dst, const void* src, std::size_t bytes) const override {
    copies++;
    inner_->copy(dst, src, bytes);
  }
  void reduce_ordered(DType t, comm::ReduceOp op, const void* const* srcs, int n, void* dst,
                      std::size_t count) const override {
    reductions++;
    inner_->reduce_ordered(t, op, srcs, n, dst, count);
  }
  void* allocate(std::size_t bytes) const override { return inner_->allocate(bytes); }
  void deallocate(void* p) const override { inner_->deallocate(p); }
  void synchronize() const override { syncs++; }
  void* queue() const override { return nullptr; }

  mutable std::atomic<int> copies{0}, reductions{0}, syncs{0};

 private:
  std::shared_ptr<const comm::DeviceMemory> inner_;
  mutable std::mutex mu_;
  std::vector<std::pair<const char*, std::size_t>> ranges_;
};

// A value whose sum over ranks depends on the order of the additions.
float order_sensitive(int rank, std::size_t i) {
  return 1.0f / static_cast<float>(3 + rank) + 1e-3f * static_cast<float>(i % 89) * static_cast<float>(rank + 1);
}

float rank_order_sum(int n, std::size_t i) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) v[static_cast<std::size_t>(r)] = order_sensitive(r, i);
  return comm::reduce_reference(comm::ReduceOp::kSum, v.data(), n);
}

// Into a separate buffer, in place into the first source (the accumulator is dst) and into a later one
// (a private accumulator, since the sums still read it).
TEST(DeviceMemory, OrderedReductionThroughTheOpInterfaceMatchesTheHostKernelBitForBit) {
  const auto dm = make_device_memory(kernels::cpu_ops());
  constexpr int kRanks = 5;
  constexpr std::size_t kCount = 1001;
  for (int into : {-1, 0, 2}) {
    SCOPED_TRACE("into " + std::to_string(into));
    std::vector<std::vector<float>> in(kRanks, std::vector<float>(kCount));
    std::vector<const void*> srcs;
    for (int r = 0; r < kRanks; ++r) {
      for (std::size_t i = 0; i < kCount; ++i) in[r][i] = order_sensitive(r, i);
      srcs.push_back(in[r].data());
    }
    std::vector<float> want(kCount), separate(kCount);
    comm::reduce_ordered(DType::kF32, comm::ReduceOp::kSum, srcs.data(), kRanks, want.data(), kCount);
    float* dst = into < 0 ? separate.data() : in[static_cast<std::size_t>(into)].data();
    dm->reduce_ordered(DType::kF32, comm::ReduceOp::kSum, srcs.data(), kRanks, dst, kCount);
    for (std::size_t i = 0; i < kCount; ++i) ASSERT_EQ(dst[i], want[i]) << i;
  }
}

TEST(DeviceMemory, LocalBackendMovesAndSumsDeviceBuffersInRankOrder) {
  constexpr int kRanks = 3;
  constexpr std::size_t kCount = 1000;  // not a multiple of the ranks: chunks of unequal size
  auto mem = std::make_shared<ClaimedMemory>();
  comm::CommOptions o;
  o.timeout_s = 30;
  o.device_memory = mem;
  comm::LocalWorld world(kRanks, o);
  std::vector<std::vector<float>> reduced(kRanks), scattered(kRanks), gathered(kRanks), received(kRanks);
  std::vector<double> flags(kRanks);
  int host_copies = -1, host_reductions = -1;
  const Status s = comm::first_error(world.run([&](comm::Communicator& c) -> Status {
    const int r = c.rank();
    std::vector<float> a(kCount * kRanks), b(kCount * kRanks), g(kCount * kRanks), p(kCount);
    for (std::vector<float>* v : {&a, &b, &g, &p}) mem->claim(v->data(), v->size() * sizeof(float));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = b[i] = order_sensitive(r, i % kCount);
    HERD_RETURN_IF_ERROR(c.all_reduce(a.data(), kCount, DType::kF32, comm::ReduceOp::kSum));
    HERD_RETURN_IF_ERROR(c.reduce_scatter(b.data(), p.data(), kCount / kRanks, DType::kF32, comm::ReduceOp::kSum));
    HERD_RETURN_IF_ERROR(c.all_gather(a.data(), g.data(), kCount, DType::kF32));
    std::vector<float> in(kCount);
    mem->claim(in.data(), in.size() * sizeof(float));
    const int next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
    comm::Handle rx = c.irecv(in.data(), kCount, DType::kF32, prev, 7);
    HERD_RETURN_IF_ERROR(c.send(a.data(), kCount, DType::kF32, next, 7));
    HERD_RETURN_IF_ERROR(rx.wait());
    HERD_RETURN_IF_ERROR(c.barrier());
    if (r == 0) host_copies = mem->copies, host_reductions = mem->reductions;
    HERD_RETURN_IF_ERROR(c.barrier());
    double flag = r;  // a host scalar: the host path, not the device's
    HERD_RETURN_IF_ERROR(c.all_reduce(&flag, 1, DType::kF64, comm::ReduceOp::kMax));
    reduced[r].assign(a.begin(), a.begin() + kCount);
    scattered[r].assign(p.begin(), p.begin() + kCount / kRanks);
    gathered[r] = g;
    received[r] = in;
    flags[r] = flag;
    return Status::Ok();
  }));
  ASSERT_TRUE(s.ok()) << s.error().message();
  for (int r = 0; r < kRanks; ++r) {
    for (std::size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(reduced[r][i], rank_order_sum(kRanks, i)) << "all_reduce, rank " << r << " element " << i;
      ASSERT_EQ(received[r][i], reduced[r][i]) << "send/recv, rank " << r;
      for (int j = 0; j < kRanks; ++j) ASSERT_EQ(gathered[r][j * kCount + i], reduced[j][i]) << "all_gather";
    }
    for (std::size_t i = 0; i < kCount / kRanks; ++i) {
      ASSERT_EQ(scattered[r][i], rank_order_sum(kRanks, r * (kCount / kRanks) + i)) << "reduce_scatter " << i;
    }
    EXPECT_EQ(flags[r], kRanks - 1);
  }
  // The device buffers went through the device memory: each rank's share of the all-reduce and the
  // reduce-scatter summed there, the rest copied there, and each rank's queue waited for.
  EXPECT_EQ(host_reductions, 2 * kRanks);
  EXPECT_EQ(host_copies, kRanks * ((kRanks - 1) + kRanks + 1));  // all-reduce gather, all-gather, recv
  EXPECT_GT(mem->syncs.load(), 0);
  // The host scalar's all-reduce did not.
  EXPECT_EQ(mem->reductions.load(), host_reductions);
}

}  // namespace
}  // namespace herd::parallel
