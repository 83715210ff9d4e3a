// One bandwidth model for collectives, shared by the communication benchmark, `herd calibrate` and the
// planner.
//
// Conventions of nccl-tests (doc/PERFORMANCE.md), restated: a collective over n ranks on a message
// of S bytes that takes t seconds has algorithm bandwidth algbw = S / t. Bus bandwidth rescales it by
// the bytes each rank must move on the wire in a bandwidth-optimal (ring or direct) algorithm, so that
// it is comparable with a link's peak and independent of n:
//   all-reduce:        2 (n - 1) / n   (a reduce-scatter then an all-gather)
//   all-gather:        (n - 1) / n     (S is the gathered, full size)
//   reduce-scatter:    (n - 1) / n     (S is the full, pre-scatter size)
//   broadcast, p2p:    1
// The planner inverts the same factors: the time of a collective on a link of bus bandwidth B is
// S * factor / B (plus latency), which is why the factor lives here and nowhere else.
#pragma once

#include <cstdint>

namespace herd {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kSendRecv };

// The busbw / algbw ratio of `c` over `n` ranks; 0 for n <= 1, where nothing crosses a link.
constexpr double bus_factor(Collective c, std::int64_t n) {
  if (n <= 1) return 0.0;
  const double nd = static_cast<double>(n);
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (nd - 1.0) / nd;
    case Collective::kAllGather: return (nd - 1.0) / nd;
    case Collective::kReduceScatter: return (nd - 1.0) / nd;
    case Collective::kBroadcast: return 1.0;
    case Collective::kSendRecv: return 1.0;
  }
  return 0.0;
}

// algbw in bytes/s for a message of `bytes` (the full buffer, as defined above) moved in `seconds`.
constexpr double alg_bandwidth(double bytes, double seconds) { return seconds > 0 ? bytes / seconds : 0.0; }

constexpr double bus_bandwidth(Collective c, std::int64_t n, double bytes, double seconds) {
  return alg_bandwidth(bytes, seconds) * bus_factor(c, n);
}

// Latency steps of the bandwidth-optimal algorithm: a ring of n ranks takes n - 1 steps for an all-gather,
// a reduce-scatter or a broadcast, twice that for an all-reduce (a reduce-scatter then an all-gather), and
// a send/recv one. `ring_steps` is the ring's n - 1, or fewer on a network whose ring crosses fewer hops
// (topology::GroupLink::ring_steps: on a torus, the sum over its axes of extent - 1).
constexpr double latency_steps(Collective c, std::int64_t ring_steps) {
  const double r = static_cast<double>(ring_steps);
  switch (c) {
    case Collective::kAllReduce: return 2.0 * r;
    case Collective::kAllGather: return r;
    case Collective::kReduceScatter: return r;
    case Collective::kBroadcast: return r;
    case Collective::kSendRecv: return 1.0;
  }
  return 0.0;
}

// Time in seconds of a collective over n ranks on links of `bus_bytes_per_s` with a per-step latency:
// the inverse of bus_bandwidth plus latency_steps x latency, the ring model. The planner's collective
// costs (planner/cost.h), the fit of `herd calibrate` (measure/comm_fit.h) and bench/comm's bus
// bandwidth all come from this and bus_factor. 0 when nothing moves (n <= 1 or no bytes).
constexpr double collective_seconds(Collective c, std::int64_t n, double bytes, double bus_bytes_per_s,
                                    double latency_s, std::int64_t ring_steps) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return bytes * bus_factor(c, n) / bus_bytes_per_s + latency_steps(c, ring_steps) * latency_s;
}
constexpr double collective_seconds(Collective c, std::int64_t n, double bytes, double bus_bytes_per_s,
                                    double latency_s) {
  return collective_seconds(c, n, bytes, bus_bytes_per_s, latency_s, n - 1);
}

}  // namespace herd
