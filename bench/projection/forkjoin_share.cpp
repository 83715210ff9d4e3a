// How many cores a fork-join team gets beside a busy process, whatever it waits with: the loaded-host
// case of herd's runtime (every kernel is an OpenMP parallel region ended by a barrier) without herd in
// it. A team of --threads threads runs --regions regions; each region is --region-us microseconds of
// one core's arithmetic, cut into --chunks chunks that the threads take as they come (schedule(dynamic)),
// so a thread that is descheduled leaves its work to the others, except the chunk it holds. Reported:
// the wall time per region against the same work on one thread alone, and the team's CPU time over the
// wall time (the cores it got, getrusage). The wait policy is libgomp's, set in the environment
// (GOMP_SPINCOUNT, OMP_WAIT_POLICY; libgomp reads them at load), and --bind pins thread i to core i.
// bench/projection/loaded_host.sh runs it beside a busy loop under each policy; bench/projection/measurements.md.
//   herd_bench_forkjoin --threads 2 --regions 4000 --region-us 500 --chunks 16 [--bind] [--out r.json]
// With --one-worker thread 0 does all of each region's work and the others wait at its barrier: their
// CPU time per region is what they spin before they sleep, so GOMP_SPINCOUNT=N gives the time of one
// libgomp wait iteration (`ns_per_spin_iteration`, when the spin ends before the region does):
//   GOMP_SPINCOUNT=10000 herd_bench_forkjoin --threads 2 --regions 2000 --region-us 1000 --one-worker
#include <omp.h>
#include <sched.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>

#include "common/bench_json.h"

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double process_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

std::atomic<float> g_sink{0};

// `iters` dependent multiply-adds: pure core time, no memory traffic, the same on every thread. The empty
// asm keeps the compiler from folding the chain (its inputs are constants after inlining).
float spin_work(std::int64_t iters, float x) {
  for (std::int64_t i = 0; i < iters; ++i) {
    x = x * 0.9999f + 0.0001f;
    asm volatile("" : "+x"(x));
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("fork-join team's share of the cores beside other jobs");
  int threads = 2, regions = 4000, chunks = 16;
  double region_us = 500;
  bool bind = false, one_worker = false;
  std::string out, label;
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--regions", regions)->capture_default_str();
  app.add_option("--region-us", region_us, "one core's work per region, microseconds")->capture_default_str();
  app.add_option("--chunks", chunks)->capture_default_str();
  app.add_flag("--bind", bind, "pin thread i to core i (sched_setaffinity)");
  app.add_flag("--one-worker", one_worker, "thread 0 does each region's work; the others only wait");
  app.add_option("--label", label, "a name for this run in the JSON (the load beside it, say)");
  app.add_option("--out", out);
  CLI11_PARSE(app, argc, argv);

  // Iterations per microsecond of this core, measured alone before the team starts.
  const std::int64_t probe = 20'000'000;
  const double t0 = now_s();
  g_sink.store(spin_work(probe, 1.0f));
  const double per_us = static_cast<double>(probe) / ((now_s() - t0) * 1e6);
  const auto chunk_iters = static_cast<std::int64_t>(per_us * region_us / chunks);

  omp_set_num_threads(threads);
  if (bind) {
#pragma omp parallel
    {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(omp_get_thread_num() % CPU_SETSIZE, &one);
      sched_setaffinity(0, sizeof one, &one);
    }
  }
  const double cpu0 = process_cpu_s(), w0 = now_s();
  for (int r = 0; r < regions; ++r) {
    if (one_worker) {
#pragma omp parallel
      if (omp_get_thread_num() == 0) g_sink.store(spin_work(chunk_iters * chunks, 1.0f), std::memory_order_relaxed);
      continue;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < chunks; ++c)
      g_sink.store(spin_work(chunk_iters, static_cast<float>(c)), std::memory_order_relaxed);
  }
  const double wall = now_s() - w0, cpu = process_cpu_s() - cpu0;

  herd::Json doc = herd::bench::envelope("fork-join team: cores obtained and time per region");
  herd::Json r;
  r["label"] = label;
  r["threads"] = threads;
  r["regions"] = regions;
  r["region_us"] = region_us;
  r["chunks"] = chunks;
  r["bind"] = bind;
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  r["gomp_spincount"] = spin ? spin : "";
  r["omp_wait_policy"] = policy ? policy : "";
  r["wall_s"] = wall;
  r["us_per_region"] = 1e6 * wall / regions;
  r["one_core_us_per_region"] = region_us;
  r["slowdown_vs_one_core"] = 1e6 * wall / regions / region_us;
  r["team_cores"] = cpu / wall;
  r["cpu_s_per_region_us"] = 1e6 * cpu / regions;
  r["one_worker"] = one_worker;
  if (one_worker) {
    // The waiting threads' CPU per region: the team's CPU beyond the worker's (the wall time).
    const double waiting_us = 1e6 * (cpu - wall) / regions / std::max(1, threads - 1);
    r["waiting_cpu_us_per_region"] = waiting_us;
    const long long n = spin ? std::atoll(spin) : 0;
    if (n > 0 && waiting_us < 0.8 * region_us) r["ns_per_spin_iteration"] = 1e3 * waiting_us / static_cast<double>(n);
  }
  doc["results"].push_back(r);
  herd::bench::write_result(doc, out);
  return 0;
}
