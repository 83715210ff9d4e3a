// Timing the local communicator's collectives and fitting the planner's link model to them.
#include "herd/measure/comm_fit.h"

#include <algorithm>

#include "herd/comm/local/local_world.h"
#include "herd/core/collective_bw.h"
#include "herd/core/stats.h"
#include "herd/core/timer.h"

namespace herd::measure {

Result<std::vector<CommSample>> time_local_collectives(int ranks, const std::vector<std::int64_t>& counts,
                                                       int repeats) {
  if (ranks < 2) return make_error("time_local_collectives: ranks must be at least 2, got ", ranks);
  std::vector<CommSample> out;
  comm::CommOptions opts;
  opts.timeout_s = 60;
  comm::LocalWorld world(ranks, opts);
  const std::vector<Status> st = world.run([&](comm::Communicator& c) -> Status {
    for (std::int64_t count : counts) {
      const std::size_t n = static_cast<std::size_t>(count);
      std::vector<float> send(n * static_cast<std::size_t>(ranks), 1.0f), recv(n * static_cast<std::size_t>(ranks));
      auto run = [&](Collective kind, const std::string& op, double bytes, auto&& fn) -> Status {
        std::vector<double> t;
        for (int i = 0; i <= repeats; ++i) {
          HERD_RETURN_IF_ERROR(c.barrier());
          Timer timer;
          HERD_RETURN_IF_ERROR(fn());
          if (i > 0) t.push_back(timer.seconds());
        }
        // The model's terms, from core/collective_bw.h: a ring of `ranks` (send/recv: two ranks).
        const std::int64_t group = kind == Collective::kSendRecv ? 2 : ranks;
        if (c.rank() == 0) {
          out.push_back({op, ranks, bytes, median(t), latency_steps(kind, group - 1), bytes * bus_factor(kind, group)});
        }
        return Status::Ok();
      };
      const double b = 4.0 * static_cast<double>(n) * static_cast<double>(ranks);  // the whole tensor
      HERD_RETURN_IF_ERROR(run(Collective::kAllReduce, "all_reduce", b, [&] {
        return c.all_reduce(send.data(), recv.data(), n * static_cast<std::size_t>(ranks), DType::kF32,
                            comm::ReduceOp::kSum);
      }));
      HERD_RETURN_IF_ERROR(run(Collective::kAllGather, "all_gather", b,
                               [&] { return c.all_gather(send.data(), recv.data(), n, DType::kF32); }));
      HERD_RETURN_IF_ERROR(run(Collective::kReduceScatter, "reduce_scatter", b, [&] {
        return c.reduce_scatter(send.data(), recv.data(), n, DType::kF32, comm::ReduceOp::kSum);
      }));
      HERD_RETURN_IF_ERROR(run(Collective::kSendRecv, "send_recv", 4.0 * static_cast<double>(n), [&]() -> Status {
        if (c.rank() == 0) return c.send(send.data(), n, DType::kF32, 1, 7);
        if (c.rank() == 1) return c.recv(recv.data(), n, DType::kF32, 0, 7);
        return Status::Ok();
      }));
    }
    return Status::Ok();
  });
  HERD_RETURN_IF_ERROR(comm::first_error(st));
  return out;
}

LinkFit fit_link(const std::vector<CommSample>& samples, double small_bytes, double large_bytes) {
  double lat = 0, inv_bw = 0;
  for (int iter = 0; iter < 3; ++iter) {
    double vol = 0, secs = 0, lsum = 0;
    int ln = 0;
    for (const CommSample& s : samples) {
      if (s.op == "send_recv") continue;
      if (s.bytes >= large_bytes) {
        vol += s.volume, secs += std::max(0.0, s.seconds - s.steps * lat);
      } else if (s.bytes <= small_bytes) {
        lsum += std::max(0.0, (s.seconds - s.volume * inv_bw) / s.steps), ++ln;
      }
    }
    inv_bw = vol > 0 ? secs / vol : 0;
    lat = ln > 0 ? lsum / ln : 0;
  }
  return LinkFit{lat, inv_bw > 0 ? 1.0 / inv_bw : 0};
}

}  // namespace herd::measure
