// Times the planner's full search (herd plan) for Llama 3 405B on 16,384 H100s of the Llama 3 cluster,
// on 131,072 and 100,000 H100s (bench/planner/h100-131k.json: the DGX fat tree with one more tier)
// and a few other cases, several repetitions each, with the step-time bounds on and off (the search
// returns the same rows either way: tests/planner/search_test.cpp), and writes the medians as JSON.
//   bench_planner_search [--out FILE] [--reps N]
#include <algorithm>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "herd/core/timer.h"
#include "herd/planner/search.h"
#include "herd/topology/cluster.h"

namespace {

struct Case {
  const char* model;
  const char* cluster;
  std::int64_t gpus, seq_len, batch;
};

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
  }
  using namespace herd;
  Json doc = bench::envelope(
      "planner search time (herd plan --top 10): wall and CPU seconds, median of repetitions, one thread");
  const Case cases[] = {
      {"llama3-405b", "llama3-h100", 16384, 8192, 2048}, {"llama3-405b", "llama3-h100", 16384, 131072, 128},
      {"llama3-405b", "llama3-h100", 8192, 8192, 2048},  {"llama3-70b", "tpu-v5p", 8192, 4096, 1024},
      {"llama3-8b", "dgx-h100", 64, 8192, 256},          {"llama3-405b", "h100-131k", 131072, 8192, 4096},
      {"llama3-405b", "h100-131k", 100000, 8192, 2000}};
  for (const Case& c : cases) {
    const auto cfg = *model::preset(c.model);
    const std::string file = std::string(HERD_SOURCE_DIR) + "/bench/planner/" + c.cluster + ".json";
    const auto cluster = *topology::resolve_cluster(topology::cluster_preset(c.cluster).ok() ? c.cluster : file);
    planner::TrainingSpec t{c.seq_len, c.batch, planner::Precision::kBF16};
    Json r;
    r["model"] = c.model;
    r["cluster"] = c.cluster;
    r["gpus"] = c.gpus;
    r["seq_len"] = c.seq_len;
    r["global_batch"] = c.batch;
    for (bool prune : {true, false}) {
      std::vector<double> times, cpu;
      planner::PlanResult last;
      planner::SearchSpace space;
      space.prune = prune;
      for (int i = 0; i < reps; ++i) {
        Timer timer;
        const std::clock_t c0 = std::clock();
        Result<planner::PlanResult> p = planner::plan(cfg, cluster, t, c.gpus, space, 10);
        times.push_back(timer.seconds());
        cpu.push_back(static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
        HERD_CHECK(p.ok(), p.error().message());
        last = std::move(*p);
      }
      std::sort(times.begin(), times.end());
      std::sort(cpu.begin(), cpu.end());
      const std::string suffix = prune ? "" : "_unpruned";
      r["search_s_median" + suffix] = times[times.size() / 2];
      r["search_s_min" + suffix] = times.front();
      r["search_s_max" + suffix] = times.back();
      r["search_cpu_s_median" + suffix] = cpu[cpu.size() / 2];
      r["layouts_costed" + suffix] = last.layouts_costed;
      if (prune) {
        r["families"] = last.families;
        r["layouts_pruned"] = last.layouts_pruned;
        r["layouts_simulated"] = last.layouts_simulated;
        r["best_layout"] = last.ranked.empty() ? "" : last.ranked.front().layout.to_string();
        r["best_mfu"] = last.ranked.empty() ? 0.0 : last.ranked.front().mfu;
      }
    }
    doc["results"].push_back(r);
  }
  bench::write_result(doc, out);
  return 0;
}
