// Per-core GEMM rate, each thread timed on its own CPU clock (speed_probe.h).
#include "herd/kernels/speed_probe.h"

#include <omp.h>

#include <vector>

#include "herd/core/stats.h"
#include "herd/core/timer.h"
#include "herd/kernels/gemm.h"

namespace herd::kernels {

std::vector<double> gemm_rate_per_thread(int threads, std::int64_t n, int repeats) {
  if (threads < 1 || n < 1 || repeats < 1) return {};
  std::vector<double> rate(static_cast<std::size_t>(threads), 0.0);
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const std::size_t elems = static_cast<std::size_t>(n * n);
  // Inside the team every gemm call is one single-threaded library call (gemm.h's split rule).
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    std::vector<float> a(elems, 0.01f), b(elems, 0.02f), c(elems, 0.0f);
    auto once = [&] { gemm<float>(Trans::kNo, Trans::kYes, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n); };
    once();
    std::vector<double> secs;
    secs.reserve(static_cast<std::size_t>(repeats));
    for (int r = 0; r < repeats; ++r) {
      const double t0 = thread_cpu_seconds();
      once();
      secs.push_back(thread_cpu_seconds() - t0);
    }
    const double mid = median(std::move(secs));
    if (t < threads && mid > 0) rate[static_cast<std::size_t>(t)] = flops / mid;
  }
  return rate;
}

}  // namespace herd::kernels
