// Scaling benchmark: one model and one global batch trained on 1, 2, 4 and 8 ranks (local backend,
// ranks as threads), reporting tokens/s and the share of rank 0's step time spent blocked in
// collectives (TimedCommunicator). This machine has 2 cores, so 8 ranks share them: the numbers to read
// are the communication shares and how they grow with the rank count, not a speed-up.
//   herd_bench_scaling [--model tiny|small] [--steps N] [--max-ranks R] [--out FILE]
// --max-ranks 1 measures only the one-rank row (the distributed path at degree 1).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include "common/bench_json.h"
#include "herd/kernels/library_env.h"
#include "herd/train/job/job.h"

namespace {

using namespace herd;
using namespace herd::train;

std::shared_ptr<const data::TokenDocuments> docs(std::int64_t vocab, std::int64_t n_docs) {
  auto d = std::make_shared<data::TokenDocuments>();
  d->vocab_size = vocab;
  std::mt19937 rng(1);
  for (std::int64_t i = 0; i < n_docs; ++i) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(50 + rng() % 400));
    for (auto& t : ids) t = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab));
    d->add_doc(ids);
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  herd::kernels::settle_library_env(argv);  // the OpenMP wait and OpenBLAS kernels herd itself runs with
  std::string model_name = "tiny", out_path;
  std::int64_t steps = 4, max_ranks = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) model_name = argv[i + 1];
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--out")) out_path = argv[i + 1];
    if (!std::strcmp(argv[i], "--max-ranks")) max_ranks = std::atoll(argv[i + 1]);
  }
  Result<model::LlamaConfig> m = model::resolve_model(model_name);
  if (!m.ok()) {
    std::cerr << m.error().message() << "\n";
    return 1;
  }
  TrainConfig cfg;
  cfg.data.seq_len = 256;
  cfg.train.global_batch = 8;   // one micro-batch per data-parallel rank (M = 1)
  cfg.train.steps = steps + 1;  // the first step warms up caches and the arena; it is not counted
  cfg.schedule.warmup_steps = 1;
  cfg.eval.every = 0;
  const auto corpus = docs(m->vocab, 2000);
  Json doc = bench::envelope("scaling: tokens/s and communication share by rank count (" + model_name + ")");
  doc["model"] = model_name;
  {
    std::ifstream la("/proc/loadavg");
    double l1 = 0;
    la >> l1;
    doc["load_average_1min_at_start"] = l1;  // the machine is shared: read the figures with this in mind
  }
  doc["note"] = "2 cores shared by every rank: read comm_share, not tokens/s ratios, as the scaling result";
  doc["global_batch_tokens"] = cfg.train.global_batch * cfg.data.seq_len;
  const std::pair<int, int> layouts[] = {{1, 1}, {1, 2}, {2, 1}, {2, 2}, {1, 4}, {2, 4}, {1, 8}};
  for (auto [tp, dp] : layouts) {
    if (tp * dp > max_ranks) continue;
    cfg.parallel.tp = tp;
    cfg.parallel.dp = dp;
    JobResult<float> r;
    Status s = run_local_job<float>(cfg, *m, {corpus, nullptr}, &r, 0, /*gather=*/false);
    if (!s.ok()) {
      std::cerr << "tp" << tp << " dp" << dp << ": " << s.error().message() << "\n";
      return 1;
    }
    std::vector<double> per_step;
    for (std::size_t i = 1; i < r.history.size(); ++i) {
      const double dt = static_cast<double>(cfg.train.global_batch * cfg.data.seq_len) / r.history[i].tokens_per_s;
      per_step.push_back(dt);
    }
    std::sort(per_step.begin(), per_step.end());
    const double median = per_step[per_step.size() / 2];
    const double comm_share = r.comm_seconds / r.step_seconds;  // over all steps of rank 0, warm-up included
    Json row = {{"ranks", tp * dp},
                {"tp", tp},
                {"dp", dp},
                {"median_step_s", median},
                {"tokens_per_s", static_cast<double>(cfg.train.global_batch * cfg.data.seq_len) / median},
                {"comm_share", comm_share},
                {"final_loss", r.history.back().loss}};
    std::cerr << row.dump() << "\n";
    doc["results"].push_back(row);
  }
  bench::write_result(doc, out_path);
  return 0;
}
