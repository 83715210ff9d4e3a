// Times generate(), check() and simulate() on pipeline schedules of the sizes the planner explores,
// PP=16, V=8, M=64 the headline. Writes the bench JSON envelope; each figure is the median of many
// repetitions (the machine is shared and noisy), with the minimum beside it.
//
//   build/bench/schedule/bench_schedule [--out FILE] [--reps N]
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "herd/core/timer.h"
#include "herd/schedule/simulate.h"

namespace {

using herd::Timer;
using namespace herd::schedule;

struct Stats {
  double median_us;
  double min_us;
};

template <typename F>
Stats time_it(int reps, F&& f) {
  std::vector<double> t;
  t.reserve(reps);
  f();  // warm caches and the allocator
  for (int i = 0; i < reps; ++i) {
    Timer timer;
    f();
    t.push_back(timer.seconds() * 1e6);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  int reps = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out = argv[++i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
  }
  herd::Json doc = herd::bench::envelope("schedule: generate / check / simulate time (microseconds)");
  struct Case {
    int pp, v, m, n;
  };
  const std::vector<Case> cases = {{4, 2, 10, 5},   {8, 4, 32, 8},    {16, 8, 64, 16},
                                   {16, 8, 64, 64}, {16, 8, 128, 16}, {32, 4, 128, 32}};
  for (const Case& c : cases) {
    ScheduleSpec spec;
    spec.pp = c.pp;
    spec.v = c.v;
    spec.microbatches = c.m;
    spec.n = c.n;
    const Schedule sched = *generate(spec);
    CostModel cost = CostModel::uniform(spec);
    cost.p2p_latency = 0.05;
    std::size_t actions = 0;
    for (const auto& r : sched.ranks) actions += r.size();
    double sink = 0;
    const Stats sim = time_it(reps, [&] { sink += simulate(sched, cost)->step_time; });
    const Stats gen =
        time_it(std::max(1, reps / 4), [&] { sink += static_cast<double>(generate(spec)->ranks.size()); });
    const Stats chk = time_it(std::max(1, reps / 4), [&] { sink += check(sched)->peak_inflight[0]; });
    herd::Json row;
    row["pp"] = c.pp;
    row["v"] = c.v;
    row["microbatches"] = c.m;
    row["n"] = c.n;
    row["actions"] = actions;
    row["simulate_median_us"] = sim.median_us;
    row["simulate_min_us"] = sim.min_us;
    row["simulate_ns_per_action"] = sim.median_us * 1e3 / static_cast<double>(actions);
    row["generate_median_us"] = gen.median_us;
    row["check_median_us"] = chk.median_us;
    row["reps"] = reps;
    row["checksum"] = sink;
    doc["results"].push_back(row);
    std::fprintf(stderr,
                 "pp=%d v=%d m=%d n=%d actions=%zu simulate %.1f us (min %.1f), generate %.1f us, check %.1f us\n",
                 c.pp, c.v, c.m, c.n, actions, sim.median_us, sim.min_us, gen.median_us, chk.median_us);
  }
  herd::bench::write_result(doc, out);
  return 0;
}
