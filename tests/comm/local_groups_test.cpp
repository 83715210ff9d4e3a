// Sub-groups from ParallelDims, point-to-point with tags, async overlap across groups, and the
// fixed reduction order (bit-exact against a sequential rank-order sum).
#include <cstring>
#include <random>
#include <vector>

#include "comm/comm_test_util.h"
#include "herd/comm/reduce.h"
#include "herd/topology/parallel_dims.h"

namespace herd::comm {
namespace {

using testing::run_ranks;
using topology::Dim;
using topology::ParallelDims;

TEST(LocalGroups, EveryMeshGroupReducesOverExactlyItsMembers) {
  const ParallelDims dims = *ParallelDims::make(2, 1, 2, 2);  // 8 ranks
  run_ranks(8, [&](Communicator& world) -> Status {
    for (Dim d : {Dim::kTP, Dim::kPP, Dim::kDP}) {
      HERD_ASSIGN_OR_RETURN(auto g, world.new_group(dims, {d}));
      COMM_EXPECT(g->name() == topology::dim_name(d));
      COMM_EXPECT(g->size() == dims.size(d));
      COMM_EXPECT(g->rank() == dims.coord(world.rank())[d], "group rank is the coordinate along ", g->name());
      // Each rank contributes 2^rank: the sum identifies the member set exactly.
      std::int64_t v = std::int64_t{1} << world.rank();
      HERD_RETURN_IF_ERROR(g->all_reduce(&v, 1, ReduceOp::kSum));
      std::int64_t want = 0;
      for (std::int64_t r : dims.group(world.rank(), d)) want += std::int64_t{1} << r;
      COMM_EXPECT(v == want, g->name(), ": ", v, " != ", want);
    }
    HERD_ASSIGN_OR_RETURN(auto tpdp, world.new_group(dims, {Dim::kTP, Dim::kDP}));
    COMM_EXPECT(tpdp->name() == "tp+dp" && tpdp->size() == 4);
    return Status::Ok();
  });
}

TEST(LocalGroups, GroupsNumberTheirCollectivesIndependently) {
  // Rank-dependent interleaving of two groups' collectives: matching is per group, so it works.
  const ParallelDims dims = *ParallelDims::make(2, 1, 1, 2);
  run_ranks(4, [&](Communicator& world) -> Status {
    HERD_ASSIGN_OR_RETURN(auto tp, world.new_group(dims, {Dim::kTP}));
    HERD_ASSIGN_OR_RETURN(auto dp, world.new_group(dims, {Dim::kDP}));
    double a = 1, b = 10;
    std::vector<Handle> hs;
    if (world.rank() % 2 == 0) {
      hs.push_back(tp->iall_reduce(&a, &a, 1, DType::kF64, ReduceOp::kSum));
      hs.push_back(dp->iall_reduce(&b, &b, 1, DType::kF64, ReduceOp::kSum));
    } else {
      hs.push_back(dp->iall_reduce(&b, &b, 1, DType::kF64, ReduceOp::kSum));
      hs.push_back(tp->iall_reduce(&a, &a, 1, DType::kF64, ReduceOp::kSum));
    }
    HERD_RETURN_IF_ERROR(wait_all(hs));
    COMM_EXPECT(a == 2 && b == 20);
    COMM_EXPECT(tp->recorder().entries().back().seq == 0, "first collective of each group has seq 0");
    return Status::Ok();
  });
}

TEST(LocalGroups, BadGroupListsAreErrorsThatNameTheRank) {
  run_ranks(4, [](Communicator& world) -> Status {
    auto dup = world.new_group({0, 1, 1}, "x");
    COMM_EXPECT(!dup.ok() && dup.error().message().find("rank 1 is listed twice") != std::string::npos);
    auto outside = world.new_group({world.rank(), 9}, "x");
    COMM_EXPECT(!outside.ok() && outside.error().message().find("rank 9 is not in group 'world'") != std::string::npos,
                outside.error().message());
    auto absent = world.new_group({(world.rank() + 1) % 4}, "x");
    COMM_EXPECT(!absent.ok() && absent.error().message().find("is not in the list") != std::string::npos);
    return Status::Ok();
  });
}

TEST(LocalPointToPoint, RingWithEarlyReceivesAndTags) {
  // Like a pipeline: every rank posts its receives first (two tags, reverse order), then sends.
  const int n = 5;
  run_ranks(n, [n](Communicator& c) -> Status {
    const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
    std::vector<float> act(100), grad(100), out_act(100), out_grad(100);
    for (int i = 0; i < 100; ++i) out_act[i] = c.rank() * 1000 + i, out_grad[i] = -(c.rank() * 1000 + i);
    std::vector<Handle> hs;
    hs.push_back(c.irecv(grad.data(), 100, DType::kF32, next, /*tag=*/1));
    hs.push_back(c.irecv(act.data(), 100, DType::kF32, prev, /*tag=*/0));
    hs.push_back(c.isend(out_act.data(), 100, DType::kF32, next, 0));
    hs.push_back(c.isend(out_grad.data(), 100, DType::kF32, prev, 1));
    HERD_RETURN_IF_ERROR(wait_all(hs));
    for (int i = 0; i < 100; ++i) {
      COMM_EXPECT(act[i] == prev * 1000 + i);
      COMM_EXPECT(grad[i] == -(next * 1000 + i));
    }
    return Status::Ok();
  });
}

TEST(LocalPointToPoint, SameTagMessagesArriveInPostingOrder) {
  run_ranks(2, [](Communicator& c) -> Status {
    std::vector<int> v(4);
    std::vector<Handle> hs;
    for (int k = 0; k < 4; ++k) {
      if (c.rank() == 0) {
        v[k] = 100 + k;
        hs.push_back(c.isend(&v[k], 1, DType::kI32, 1, 7));
      } else {
        hs.push_back(c.irecv(&v[k], 1, DType::kI32, 0, 7));
      }
    }
    HERD_RETURN_IF_ERROR(wait_all(hs));
    for (int k = 0; k < 4; ++k) COMM_EXPECT(v[k] == 100 + k);
    return Status::Ok();
  });
}

TEST(LocalPointToPoint, SizeMismatchFailsBothSides) {
  LocalWorld world(2, testing::test_options());
  auto st = world.run([](Communicator& c) -> Status {
    std::vector<float> buf(8);
    return c.rank() == 0 ? c.send(buf.data(), 8, DType::kF32, 1, 3) : c.recv(buf.data(), 4, DType::kF32, 0, 3);
  });
  for (const Status& s : st) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message().find("sent fp32 x 8, global rank 1 expected fp32 x 4"), std::string::npos)
        << s.error().message();
  }
}

TEST(LocalPointToPoint, BadPeerAndTagAreErrors) {
  run_ranks(2, [](Communicator& c) -> Status {
    float x = 0;
    Status s = c.send(&x, 1, DType::kF32, c.rank(), 0);
    COMM_EXPECT(!s.ok() && s.error().message().find("must be another group rank") != std::string::npos);
    s = c.recv(&x, 1, DType::kF32, 5, 0);
    COMM_EXPECT(!s.ok() && s.error().message().find("peer 5") != std::string::npos);
    s = c.recv(&x, 1, DType::kF32, 1 - c.rank(), -2);
    COMM_EXPECT(!s.ok() && s.error().message().find("tag -2") != std::string::npos);
    s = c.broadcast(&x, 1, DType::kF32, 2);
    COMM_EXPECT(!s.ok() && s.error().message().find("root 2") != std::string::npos);
    return Status::Ok();
  });
}

TEST(LocalAsync, ManyOutstandingOpsOverlapAndWaitInAnyOrder) {
  // FSDP-like: all-gather the next unit while reduce-scattering the previous one's gradients.
  const ParallelDims dims = *ParallelDims::make(2, 1, 1, 2);
  run_ranks(4, [&](Communicator& world) -> Status {
    HERD_ASSIGN_OR_RETURN(auto dp, world.new_group(dims, {Dim::kDP}));
    HERD_ASSIGN_OR_RETURN(auto tp, world.new_group(dims, {Dim::kTP}));
    const std::size_t shard = 1000;
    std::vector<std::vector<float>> units(3, std::vector<float>(2 * shard)), shards(3, std::vector<float>(shard));
    std::vector<float> grads(2 * shard), gshard(shard), tp_sum(shard);
    for (int u = 0; u < 3; ++u)
      for (std::size_t i = 0; i < shard; ++i) shards[u][i] = u * 1e4f + dp->rank() * shard + i;
    for (std::size_t i = 0; i < 2 * shard; ++i) grads[i] = static_cast<float>(world.rank());
    for (std::size_t i = 0; i < shard; ++i) tp_sum[i] = 1.0f;
    std::vector<Handle> hs;
    for (int u = 0; u < 3; ++u) hs.push_back(dp->iall_gather(shards[u].data(), units[u].data(), shard, DType::kF32));
    hs.push_back(dp->ireduce_scatter(grads.data(), gshard.data(), shard, DType::kF32, ReduceOp::kSum));
    hs.push_back(tp->iall_reduce(tp_sum.data(), tp_sum.data(), shard, DType::kF32, ReduceOp::kSum));
    while (!hs[1].test()) {
    }
    for (int k = static_cast<int>(hs.size()) - 1; k >= 0; --k) HERD_RETURN_IF_ERROR(hs[k].wait());
    for (int u = 0; u < 3; ++u)
      for (std::size_t i = 0; i < 2 * shard; ++i) COMM_EXPECT(units[u][i] == u * 1e4f + i);
    const std::vector<std::int64_t> members = dims.group(world.rank(), Dim::kDP);
    for (std::size_t i = 0; i < shard; ++i) {
      COMM_EXPECT(gshard[i] == static_cast<float>(members[0] + members[1]));
      COMM_EXPECT(tp_sum[i] == 2.0f);
    }
    return Status::Ok();
  });
}

// Values with wildly different magnitudes, so that the order of a floating-point sum matters.
std::vector<double> noisy(int rank, std::size_t count) {
  std::mt19937_64 gen(1234 + rank);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-30, 30);
  std::vector<double> v(count);
  for (double& x : v) x = std::ldexp(mant(gen), expo(gen));
  return v;
}

TEST(LocalDeterminism, AllReduceAndReduceScatterMatchTheRankOrderSumBitForBit) {
  const std::size_t count = 4096;
  for (int n : {2, 3, 4, 7}) {
    std::vector<std::vector<double>> in(n);
    for (int r = 0; r < n; ++r) in[r] = noisy(r, count);
    std::vector<double> ref(count);
    int order_matters = 0;
    for (std::size_t i = 0; i < count; ++i) {
      std::vector<double> col(n);
      for (int r = 0; r < n; ++r) col[r] = in[r][i];
      ref[i] = reduce_reference(ReduceOp::kSum, col.data(), n);
      std::reverse(col.begin(), col.end());
      order_matters += reduce_reference(ReduceOp::kSum, col.data(), n) != ref[i];
    }
    if (n > 2) {
      EXPECT_GT(order_matters, 0) << "the data must be able to tell orders apart";
    }
    run_ranks(n, [&](Communicator& c) -> Status {
      std::vector<double> ar = in[c.rank()];
      HERD_RETURN_IF_ERROR(c.all_reduce(ar.data(), count, ReduceOp::kSum));
      COMM_EXPECT(std::memcmp(ar.data(), ref.data(), count * sizeof(double)) == 0, "all_reduce differs, n=", n);
      const std::size_t per = count / n;
      std::vector<double> rs(per);
      HERD_RETURN_IF_ERROR(c.reduce_scatter(in[c.rank()].data(), rs.data(), per, DType::kF64, ReduceOp::kSum));
      COMM_EXPECT(std::memcmp(rs.data(), ref.data() + c.rank() * per, per * sizeof(double)) == 0,
                  "reduce_scatter differs, n=", n);
      return Status::Ok();
    });
  }
}

}  // namespace
}  // namespace herd::comm
