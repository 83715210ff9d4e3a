// The one collective cost model (core/collective_bw.h) on hand-computed numbers: the nccl-tests bus
// factors, the latency steps of the ring, and their sum as a collective's time.
#include "herd/core/collective_bw.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

TEST(CollectiveBw, BusFactorsAreTheBytesEachRankMoves) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 8), 2.0 * 7 / 8);  // 2 (n - 1) / n
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 4), 0.75);  // (n - 1) / n
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kBroadcast, 16), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kSendRecv, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 1), 0.0);  // nothing crosses a link
  // 1 GiB all-reduce over 8 ranks in 0.1 s: algbw 10.7 GB/s, busbw 7/4 of it.
  const double gib = 1024.0 * 1024 * 1024;
  EXPECT_DOUBLE_EQ(alg_bandwidth(gib, 0.1), gib / 0.1);
  EXPECT_DOUBLE_EQ(bus_bandwidth(Collective::kAllReduce, 8, gib, 0.1), gib / 0.1 * 1.75);
  EXPECT_DOUBLE_EQ(alg_bandwidth(gib, 0), 0.0);
}

TEST(CollectiveBw, LatencyStepsOfTheRing) {
  EXPECT_DOUBLE_EQ(latency_steps(Collective::kAllReduce, 7), 14.0);  // reduce-scatter then all-gather
  EXPECT_DOUBLE_EQ(latency_steps(Collective::kAllGather, 7), 7.0);
  EXPECT_DOUBLE_EQ(latency_steps(Collective::kReduceScatter, 7), 7.0);
  EXPECT_DOUBLE_EQ(latency_steps(Collective::kBroadcast, 7), 7.0);
  EXPECT_DOUBLE_EQ(latency_steps(Collective::kSendRecv, 7), 1.0);
}

TEST(CollectiveBw, TimeIsBytesOverBusBandwidthPlusLatencySteps) {
  // 4 GB all-gathered over 4 ranks at 100 GB/s bus, 10 us per step: 3/4 x 4e9 / 1e11 + 3 x 1e-5.
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kAllGather, 4, 4e9, 1e11, 1e-5), 0.03 + 3e-5);
  // The same tensor all-reduced: twice the bytes (2 x 3/4) and twice the steps.
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kAllReduce, 4, 4e9, 1e11, 1e-5), 0.06 + 6e-5);
  // A 2 x 2 torus: a ring of 4 crosses 2 hops, so 2 steps (4 for all-reduce) with the same bytes.
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kAllReduce, 4, 4e9, 1e11, 1e-5, 2), 0.06 + 4e-5);
  // Send/recv of 1 MB at 1 GB/s with 5 us latency.
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kSendRecv, 2, 1e6, 1e9, 5e-6), 1e-3 + 5e-6);
  // Nothing moves: one rank, or no bytes.
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kAllReduce, 1, 4e9, 1e11, 1e-5), 0.0);
  EXPECT_DOUBLE_EQ(collective_seconds(Collective::kAllGather, 8, 0, 1e11, 1e-5), 0.0);
  // The time inverts the bus bandwidth: without latency, busbw of the predicted time is the link's.
  const double t = collective_seconds(Collective::kReduceScatter, 8, 3e8, 2e10, 0);
  EXPECT_DOUBLE_EQ(bus_bandwidth(Collective::kReduceScatter, 8, 3e8, t), 2e10);
}

}  // namespace
}  // namespace herd
