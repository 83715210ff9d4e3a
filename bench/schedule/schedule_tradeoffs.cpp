// The two measured trade-offs of docs/schedule.md, printed as Markdown tables and written as JSON:
//  1. depth-first vs breadth-first: for fixed PP, V, M, how rank 0's peak in-flight micro-batches and
//     the step time with a non-zero point-to-point latency change as N goes from PP to M;
//  2. balancing: with the output projection + loss costing about one layer, lighter first and last
//     stages against an even layer split.
// Costs are in units of one transformer layer's forward (backward = 2), as `herd schedule --cost llama`.
//
//   build/bench/schedule/schedule_tradeoffs [--out FILE]
#include <cstdio>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "herd/schedule/simulate.h"

namespace {

using namespace herd::schedule;

SimResult run(const ScheduleSpec& spec, const CostModel& cost) {
  const Schedule s = *generate(spec);
  return *simulate(s, cost);
}

ScheduleSpec flexible(int pp, int v, int m, int n) {
  ScheduleSpec s;
  s.pp = pp;
  s.v = v;
  s.microbatches = m;
  s.n = n;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--out") out = argv[i + 1];
  }
  herd::Json doc = herd::bench::envelope("schedule: DFS/BFS trade-off and lighter-ends balancing (simulated)");
  herd::Json dfs = herd::Json::array(), bal = herd::Json::array();

  // 1. PP 4, V 2, M 16; 30 layers (4 slots per stage, lighter ends), output = 1 layer.
  const int pp = 4, v = 2, m = 16;
  const LayerAssignment layers = *assign_layers(4 * pp * v - 2, pp, v, true);
  const std::vector<double> latencies = {0.0, 0.5, 1.0, 2.0};
  std::printf("## DFS vs BFS: PP=%d V=%d M=%d, %d layers, stage forward 4 units\n\n", pp, v, m, 4 * pp * v - 2);
  std::printf("| N | peak in-flight rank 0 | peak activations rank 0 (layers) |");
  for (double l : latencies) std::printf(" step, latency %.1f |", l);
  std::printf(" step, latency 1.0 sync |\n|---|---|---|");
  for (std::size_t i = 0; i <= latencies.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (int n = pp; n <= m; ++n) {
    herd::Json row;
    row["n"] = n;
    std::printf("| %d |", n);
    for (std::size_t i = 0; i < latencies.size(); ++i) {
      LayerCosts lc;
      lc.p2p_latency = latencies[i];
      const SimResult r = run(flexible(pp, v, m, n), CostModel::from_layers(layers, lc));
      if (i == 0) {
        row["peak_inflight_rank0"] = r.peak_inflight[0];
        row["peak_activation_rank0"] = r.peak_activation_bytes[0];
        std::printf(" %d | %.0f |", r.peak_inflight[0], r.peak_activation_bytes[0]);
      }
      row["step_time_latency_" + std::to_string(latencies[i]).substr(0, 3)] = r.step_time;
      std::printf(" %.1f |", r.step_time);
    }
    LayerCosts sync;
    sync.p2p_latency = 1.0;
    sync.async_send = false;
    const SimResult rs = run(flexible(pp, v, m, n), CostModel::from_layers(layers, sync));
    row["step_time_latency_1.0_sync"] = rs.step_time;
    std::printf(" %.1f |\n", rs.step_time);
    dfs.push_back(row);
  }

  // 2. Balancing: lighter ends vs even split, output = 1 layer, embedding = 0, no latency.
  std::printf("\n## Lighter ends vs even split (output+loss = 1 layer forward)\n\n");
  std::printf("| PP | V | M | N | layers | max stage forward, lighter / even | step lighter | step even | gain |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  struct Case {
    int pp, v, m, n;
  };
  for (const Case& c : {Case{4, 1, 8, 4}, Case{4, 2, 8, 4}, Case{4, 2, 16, 8}, Case{8, 2, 16, 8}, Case{8, 4, 32, 8},
                        Case{16, 8, 64, 16}}) {
    // Layers for an exact Llama 3 style split: one layer per stage fewer at each end.
    const int per_stage = c.pp * c.v >= 64 ? 2 : 4;
    const int n_layers = per_stage * c.pp * c.v - 2;
    LayerCosts lc;
    const CostModel light = CostModel::from_layers(*assign_layers(n_layers, c.pp, c.v, true), lc);
    const CostModel even = CostModel::from_layers(*assign_layers(n_layers, c.pp, c.v, false), lc);
    const SimResult a = run(flexible(c.pp, c.v, c.m, c.n), light), b = run(flexible(c.pp, c.v, c.m, c.n), even);
    double max_l = 0, max_e = 0;
    for (double x : light.forward) max_l = std::max(max_l, x);
    for (double x : even.forward) max_e = std::max(max_e, x);
    std::printf("| %d | %d | %d | %d | %d | %.0f / %.0f | %.1f | %.1f | %.1f%% |\n", c.pp, c.v, c.m, c.n, n_layers,
                max_l, max_e, a.step_time, b.step_time, 100 * (b.step_time - a.step_time) / b.step_time);
    herd::Json row;
    row["pp"] = c.pp;
    row["v"] = c.v;
    row["microbatches"] = c.m;
    row["n"] = c.n;
    row["layers"] = n_layers;
    row["step_time_lighter_ends"] = a.step_time;
    row["step_time_even"] = b.step_time;
    bal.push_back(row);
  }
  doc["results"].push_back({{"dfs_bfs", dfs}, {"balancing", bal}});
  herd::bench::write_result(doc, out);
  return 0;
}
