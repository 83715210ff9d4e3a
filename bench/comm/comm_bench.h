// Shared pieces of the communication benchmark: the sweep definition, the timing rule and the
// result record, so the in-process (local) and mpirun (mpi) halves measure the same way.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "herd/comm/types.h"
#include "herd/core/collective_bw.h"
#include "herd/core/json.h"

namespace herd::bench {

struct Sweep {
  std::vector<int> ranks = {2, 4, 8};
  std::size_t min_bytes = 4096;
  std::size_t max_bytes = 16u << 20;
  std::vector<comm::OpKind> ops = {comm::OpKind::kAllReduce, comm::OpKind::kAllGather, comm::OpKind::kReduceScatter,
                                   comm::OpKind::kBroadcast};
  int reps = 3;                             // timed repetitions; the median is reported
  double bytes_per_rep = 64.0 * (1 << 20);  // iterations per repetition: about this much data, 2..100 iterations
};

inline int iterations(const Sweep& s, std::size_t bytes) {
  const double it = s.bytes_per_rep / static_cast<double>(bytes);
  return it < 2 ? 2 : it > 100 ? 100 : static_cast<int>(it);
}

inline std::vector<std::size_t> sizes(const Sweep& s) {
  std::vector<std::size_t> out;
  for (std::size_t b = s.min_bytes; b <= s.max_bytes; b *= 4) out.push_back(b);
  return out;
}

inline Collective collective(comm::OpKind op) {
  switch (op) {
    case comm::OpKind::kAllReduce: return Collective::kAllReduce;
    case comm::OpKind::kAllGather: return Collective::kAllGather;
    case comm::OpKind::kReduceScatter: return Collective::kReduceScatter;
    default: return Collective::kBroadcast;
  }
}

// Elements per rank for an op on a message of `bytes` (nccl-tests sizes: the full buffer) in fp32:
// all_reduce/broadcast count; all_gather send count; reduce_scatter receive count.
inline std::size_t per_rank_count(comm::OpKind op, std::size_t bytes, int n) {
  const std::size_t elems = bytes / 4;
  return (op == comm::OpKind::kAllGather || op == comm::OpKind::kReduceScatter) ? elems / n : elems;
}

inline Json result(const std::string& impl, comm::OpKind op, int n, std::size_t bytes, int iters, double seconds) {
  Json r;
  r["impl"] = impl;
  r["op"] = comm::op_name(op);
  r["ranks"] = n;
  r["bytes"] = bytes;
  r["iters"] = iters;
  r["time_us"] = seconds * 1e6;
  r["algbw_gb_per_s"] = alg_bandwidth(static_cast<double>(bytes), seconds) / 1e9;
  r["busbw_gb_per_s"] = bus_bandwidth(collective(op), n, static_cast<double>(bytes), seconds) / 1e9;
  return r;
}

// Runs the MPI half in this process (under mpirun): herd mpi (deterministic), herd mpi (native) and
// raw MPI collectives; returns the results on rank 0 (empty elsewhere).
Json run_mpi_child(const Sweep& s);
bool mpi_bench_available();

}  // namespace herd::bench
