// The MPI half of the communication benchmark, run under mpirun: herd's MPI backend in both modes
// and MPI's own blocking collectives, timed the same way as the local half.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "comm_bench.h"
#include "herd/comm/world.h"
#include "herd/core/format.h"

namespace herd::bench {
namespace {

using comm::OpKind;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void raw_op(OpKind op, std::vector<float>& send, std::vector<float>& recv, int count) {
  switch (op) {
    case OpKind::kAllReduce: MPI_Allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); return;
    case OpKind::kAllGather:
      MPI_Allgather(send.data(), count, MPI_FLOAT, recv.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
      return;
    case OpKind::kReduceScatter:
      MPI_Reduce_scatter_block(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      return;
    default: MPI_Bcast(send.data(), count, MPI_FLOAT, 0, MPI_COMM_WORLD); return;
  }
}

Status herd_op(comm::Communicator& c, OpKind op, std::vector<float>& send, std::vector<float>& recv,
               std::size_t count) {
  using comm::ReduceOp;
  switch (op) {
    case OpKind::kAllReduce: return c.all_reduce(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
    case OpKind::kAllGather: return c.all_gather(send.data(), recv.data(), count, DType::kF32);
    case OpKind::kReduceScatter: return c.reduce_scatter(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
    default: return c.broadcast(send.data(), count, DType::kF32, 0);
  }
}

}  // namespace

bool mpi_bench_available() { return std::string(HERD_BENCH_MPIRUN).size() > 0; }

Json run_mpi_child(const Sweep& s) {
  comm::CommOptions det, native;
  det.timeout_s = native.timeout_s = 600;
  native.deterministic = false;
  auto cd = comm::make_mpi_world(det);
  auto cn = comm::make_mpi_world(native);
  HERD_CHECK(cd.ok() && cn.ok(), "MPI world");
  const int n = (*cd)->size(), rank = (*cd)->rank();
  Json out = Json::array();
  for (OpKind op : s.ops) {
    for (std::size_t bytes : sizes(s)) {
      const std::size_t count = per_rank_count(op, bytes, n);
      std::vector<float> send(op == OpKind::kReduceScatter ? count * n : count, 1.0f);
      std::vector<float> recv(op == OpKind::kAllGather ? count * n : count);
      const int iters = iterations(s, bytes);
      for (const char* impl : {"mpi", "mpi_native", "mpi_raw"}) {
        const std::string name = impl;
        auto once = [&] {
          if (name == "mpi_raw") {
            raw_op(op, send, recv, static_cast<int>(count));
          } else {
            const Status st = herd_op(name == "mpi" ? **cd : **cn, op, send, recv, count);
            HERD_CHECK(st.ok(), st.error().message());
          }
        };
        once();
        std::vector<double> times;
        for (int rep = 0; rep < s.reps; ++rep) {
          MPI_Barrier(MPI_COMM_WORLD);
          const double t0 = MPI_Wtime();
          for (int i = 0; i < iters; ++i) once();
          MPI_Barrier(MPI_COMM_WORLD);
          times.push_back((MPI_Wtime() - t0) / iters);
        }
        if (rank == 0) {
          Json r = result(name, op, n, bytes, iters, median(times));
          std::fprintf(stderr, "%-10s %-15s n=%d %10s  %10.1f us  busbw %7.2f GB/s\n", impl, comm::op_name(op), n,
                       format_bytes(static_cast<double>(bytes)).c_str(), r["time_us"].get<double>(),
                       r["busbw_gb_per_s"].get<double>());
          out.push_back(std::move(r));
        }
      }
    }
  }
  return out;
}

}  // namespace herd::bench
