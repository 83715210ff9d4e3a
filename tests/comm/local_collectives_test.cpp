// Collectives of the local backend on data whose exact result is known in closed form (rank r
// contributes r * count + i at element i), for every op, several group sizes and element types.
#include <cstdint>
#include <numeric>
#include <vector>

#include "comm/comm_test_util.h"

namespace herd::comm {
namespace {

using testing::run_ranks;

template <typename T>
void check_all_reduce_sum(int n, std::size_t count) {
  run_ranks(n, [&](Communicator& c) -> Status {
    std::vector<T> buf(count), out(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<T>(c.rank() * count + i);
    HERD_RETURN_IF_ERROR(c.all_reduce(buf.data(), out.data(), count, dtype_of<T>(), ReduceOp::kSum));
    for (std::size_t i = 0; i < count; ++i) {
      // sum_r (r * count + i) = count * n (n - 1) / 2 + n * i
      const T want = static_cast<T>(count * n * (n - 1) / 2 + n * i);
      COMM_EXPECT(out[i] == want, "element ", i, ": ", out[i], " != ", want);
    }
    // In place gives the same.
    HERD_RETURN_IF_ERROR(c.all_reduce(buf.data(), count, dtype_of<T>(), ReduceOp::kSum));
    COMM_EXPECT(buf == out);
    return Status::Ok();
  });
}

TEST(LocalCollectives, AllReduceSumEveryTypeAndSize) {
  for (int n : {1, 2, 3, 4, 8}) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4099}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(count));
      check_all_reduce_sum<float>(n, count);
      check_all_reduce_sum<double>(n, count);
      check_all_reduce_sum<std::int32_t>(n, count);
      check_all_reduce_sum<std::int64_t>(n, count);
    }
  }
}

TEST(LocalCollectives, AllReduceMaxAndMin) {
  run_ranks(5, [](Communicator& c) -> Status {
    const std::size_t count = 300;
    std::vector<double> mx(count), mn(count);
    // Rank (i % 5) holds the largest value of element i and rank (i + 1) % 5 the smallest.
    for (std::size_t i = 0; i < count; ++i) {
      const int r = c.rank();
      mx[i] = mn[i] = (r == static_cast<int>(i % 5)) ? 1000.0 + i : (r == static_cast<int>((i + 1) % 5) ? -5.0 - i : r);
    }
    HERD_RETURN_IF_ERROR(c.all_reduce(mx.data(), count, ReduceOp::kMax));
    HERD_RETURN_IF_ERROR(c.all_reduce(mn.data(), count, ReduceOp::kMin));
    for (std::size_t i = 0; i < count; ++i) {
      COMM_EXPECT(mx[i] == 1000.0 + i, "max at ", i);
      COMM_EXPECT(mn[i] == -5.0 - i, "min at ", i);
    }
    return Status::Ok();
  });
}

TEST(LocalCollectives, AllGatherInAndOutOfPlace) {
  for (int n : {1, 2, 3, 8}) {
    run_ranks(n, [n](Communicator& c) -> Status {
      const std::size_t count = 333;
      std::vector<float> mine(count), out(n * count), inplace(n * count, -1.0f);
      for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(c.rank() * count + i);
      HERD_RETURN_IF_ERROR(c.all_gather(mine.data(), out.data(), count, DType::kF32));
      std::copy(mine.begin(), mine.end(), inplace.begin() + c.rank() * count);
      HERD_RETURN_IF_ERROR(c.all_gather(inplace.data() + c.rank() * count, inplace.data(), count, DType::kF32));
      for (std::size_t k = 0; k < n * count; ++k) {
        COMM_EXPECT(out[k] == static_cast<float>(k), "element ", k);
        COMM_EXPECT(inplace[k] == static_cast<float>(k), "in-place element ", k);
      }
      return Status::Ok();
    });
  }
}

TEST(LocalCollectives, ReduceScatterInAndOutOfPlace) {
  for (int n : {1, 2, 4, 6}) {
    run_ranks(n, [n](Communicator& c) -> Status {
      const std::size_t count = 129;
      const std::size_t total = n * count;
      std::vector<double> send(total), out(count);
      for (std::size_t i = 0; i < total; ++i) send[i] = static_cast<double>(c.rank() * total + i);
      HERD_RETURN_IF_ERROR(c.reduce_scatter(send.data(), out.data(), count, DType::kF64, ReduceOp::kSum));
      double* in_place = send.data() + c.rank() * count;
      HERD_RETURN_IF_ERROR(c.reduce_scatter(send.data(), in_place, count, DType::kF64, ReduceOp::kSum));
      for (std::size_t i = 0; i < count; ++i) {
        const std::size_t g = c.rank() * count + i;  // global element index
        const double want = static_cast<double>(total * n * (n - 1) / 2 + n * g);
        COMM_EXPECT(out[i] == want, "element ", i);
        COMM_EXPECT(in_place[i] == want, "in-place element ", i);
      }
      return Status::Ok();
    });
  }
}

TEST(LocalCollectives, BroadcastFromEveryRoot) {
  const int n = 4;
  run_ranks(n, [](Communicator& c) -> Status {
    for (int root = 0; root < c.size(); ++root) {
      std::vector<std::int64_t> buf(1000, -1);
      if (c.rank() == root) std::iota(buf.begin(), buf.end(), root * 10000);
      HERD_RETURN_IF_ERROR(c.broadcast(buf.data(), buf.size(), DType::kI64, root));
      for (std::size_t i = 0; i < buf.size(); ++i) COMM_EXPECT(buf[i] == root * 10000 + static_cast<std::int64_t>(i));
    }
    return Status::Ok();
  });
}

TEST(LocalCollectives, BarrierOrdersWritesBeforeAndAfter) {
  const int n = 6;
  std::vector<int> slots(n * 3, 0);
  run_ranks(n, [&](Communicator& c) -> Status {
    for (int round = 0; round < 3; ++round) {
      slots[round * n + c.rank()] = round + 1;
      HERD_RETURN_IF_ERROR(c.barrier());
      for (int j = 0; j < n; ++j) COMM_EXPECT(slots[round * n + j] == round + 1, "round ", round, " rank ", j);
    }
    return Status::Ok();
  });
}

TEST(LocalCollectives, BytesTypesAreMovedButNotReduced) {
  run_ranks(3, [](Communicator& c) -> Status {
    std::vector<std::uint16_t> mine(10, static_cast<std::uint16_t>(c.rank() + 1)), all(30);
    HERD_RETURN_IF_ERROR(c.all_gather(mine.data(), all.data(), 10, DType::kBF16));
    for (int k = 0; k < 30; ++k) COMM_EXPECT(all[k] == k / 10 + 1);
    const Status s = c.all_reduce(mine.data(), 10, DType::kBF16, ReduceOp::kSum);
    COMM_EXPECT(!s.ok());
    COMM_EXPECT(s.error().message().find("bf16 cannot be reduced") != std::string::npos, s.error().message());
    return Status::Ok();
  });
}

}  // namespace
}  // namespace herd::comm
