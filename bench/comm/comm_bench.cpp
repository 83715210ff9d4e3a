// Communication benchmark (nccl-tests conventions): for each collective, message size (4 KiB ..
// 16 MiB by default) and rank count (2, 4, 8), the time per op, algbw and busbw of
//   local       herd's local backend (ranks as threads, always deterministic)
//   mpi         herd's MPI backend, deterministic (herd's point-to-point algorithms)
//   mpi_native  herd's MPI backend, native mode (MPI's non-blocking collectives under herd's handles)
//   mpi_raw     MPI's blocking collectives called directly, the peer to beat
// The MPI rows come from this same binary re-launched under mpirun (--mpi-child), so one run writes
// one JSON document. Timing: a barrier, `iters` back-to-back ops, a barrier; time per op is the
// elapsed time over iters on rank 0, the median of `reps` repetitions. busbw uses
// herd/core/collective_bw.h, the formulas the planner uses.
//
//   herd_bench_comm [--out FILE] [--ranks 2,4,8] [--min-bytes 4096] [--max-bytes 16777216]
//                   [--reps 3] [--no-mpi] [--no-local]
#include "comm_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "common/bench_json.h"
#include "herd/comm/local/local_world.h"
#include "herd/core/format.h"
#include "herd/core/timer.h"

namespace herd::bench {
namespace {

using comm::Communicator;
using comm::OpKind;
using comm::ReduceOp;

Status run_op(Communicator& c, OpKind op, std::vector<float>& send, std::vector<float>& recv, std::size_t count) {
  switch (op) {
    case OpKind::kAllReduce: return c.all_reduce(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
    case OpKind::kAllGather: return c.all_gather(send.data(), recv.data(), count, DType::kF32);
    case OpKind::kReduceScatter: return c.reduce_scatter(send.data(), recv.data(), count, DType::kF32, ReduceOp::kSum);
    default: return c.broadcast(send.data(), count, DType::kF32, 0);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Json run_local(const Sweep& s, int n) {
  Json out = Json::array();
  comm::CommOptions o;
  o.timeout_s = 600;
  comm::LocalWorld world(n, o);
  const Status st = comm::first_error(world.run([&](Communicator& c) -> Status {
    for (OpKind op : s.ops) {
      for (std::size_t bytes : sizes(s)) {
        const std::size_t count = per_rank_count(op, bytes, n);
        std::vector<float> send(op == OpKind::kReduceScatter ? count * n : count, 1.0f);
        std::vector<float> recv(op == OpKind::kAllGather ? count * n : count);
        const int iters = iterations(s, bytes);
        HERD_RETURN_IF_ERROR(run_op(c, op, send, recv, count));  // warm-up: pages touched
        std::vector<double> times;
        for (int rep = 0; rep < s.reps; ++rep) {
          HERD_RETURN_IF_ERROR(c.barrier());
          Timer t;
          for (int i = 0; i < iters; ++i) HERD_RETURN_IF_ERROR(run_op(c, op, send, recv, count));
          HERD_RETURN_IF_ERROR(c.barrier());
          times.push_back(t.seconds() / iters);
        }
        if (c.rank() == 0) {
          Json r = result("local", op, n, bytes, iters, median(times));
          std::fprintf(stderr, "local      %-15s n=%d %10s  %10.1f us  busbw %7.2f GB/s\n", comm::op_name(op), n,
                       format_bytes(static_cast<double>(bytes)).c_str(), r["time_us"].get<double>(),
                       r["busbw_gb_per_s"].get<double>());
          out.push_back(std::move(r));
        }
      }
    }
    return Status::Ok();
  }));
  HERD_CHECK(st.ok(), st.error().message());
  return out;
}

Json run_mpi_parent(const Sweep& s, int n, const std::string& self) {
  const std::string tmp = (std::filesystem::temp_directory_path() /
                           ("herd_bench_comm_" + std::to_string(getpid()) + "_" + std::to_string(n) + ".json"))
                              .string();
  std::ostringstream cmd;
  cmd << HERD_BENCH_MPIRUN << " --allow-run-as-root --oversubscribe --bind-to none -np " << n << " " << self
      << " --mpi-child --out " << tmp << " --min-bytes " << s.min_bytes << " --max-bytes " << s.max_bytes << " --reps "
      << s.reps;
  std::fprintf(stderr, "running: %s\n", cmd.str().c_str());
  const int rc = std::system(cmd.str().c_str());
  if (rc != 0) {
    std::fprintf(stderr, "mpirun failed (status %d); MPI rows for %d ranks are missing\n", rc, n);
    return Json::array();
  }
  auto doc = read_json_file(tmp);
  std::filesystem::remove(tmp);
  HERD_CHECK(doc.ok(), doc.error().message());
  return *doc;
}

// The 1-minute load average: on a shared machine it says how much the numbers can be trusted.
double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return l;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

}  // namespace
}  // namespace herd::bench

int main(int argc, char** argv) {
  using namespace herd::bench;
  Sweep s;
  std::string out_path;
  bool child = false, local = true, mpi = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--out") {
      out_path = next();
    } else if (a == "--ranks") {
      s.ranks = parse_list(next());
    } else if (a == "--min-bytes") {
      s.min_bytes = std::stoull(next());
    } else if (a == "--max-bytes") {
      s.max_bytes = std::stoull(next());
    } else if (a == "--reps") {
      s.reps = std::stoi(next());
    } else if (a == "--mpi-child") {
      child = true;
    } else if (a == "--no-mpi") {
      mpi = false;
    } else if (a == "--no-local") {
      local = false;
    } else {
      std::fprintf(stderr, "unknown argument %s; see the header of bench/comm/comm_bench.cpp\n", a.c_str());
      return 2;
    }
  }
  if (child) {
    herd::Json rows = run_mpi_child(s);
    if (!rows.empty()) {
      std::ofstream f(out_path);
      f << rows.dump() << "\n";
    }
    return 0;
  }
  herd::Json doc = envelope("comm: algbw and busbw by collective, message size and rank count");
  doc["sweep"] = {{"ranks", s.ranks},         {"min_bytes", s.min_bytes},
                  {"max_bytes", s.max_bytes}, {"reps", s.reps},
                  {"dtype", "fp32"},          {"timing", "median over reps of (barrier, iters ops, barrier) / iters"}};
  doc["load_average_at_start"] = load_average();
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int n : s.ranks) {
    if (local) {
      for (auto& r : run_local(s, n)) doc["results"].push_back(r);
    }
    if (mpi && mpi_bench_available()) {
      for (auto& r : run_mpi_parent(s, n, self)) doc["results"].push_back(r);
    }
  }
  doc["load_average_at_end"] = load_average();
  write_result(doc, out_path);
  return 0;
}
