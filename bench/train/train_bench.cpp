// herd's training step throughput on one CPU rank: tokens/s and achieved FLOP/s of full training steps
// (forward, backward, clipping, AdamW) of a preset model, beside the BLAS's own SGEMM peak measured in
// the same process with the same thread count. bench/train/run.sh runs it next to the PyTorch peer
// (torch_peer.py) on the same model and batch.
//
//   herd_bench_train --model small --threads 1 --micro-batch 8 --seq-len 512 --steps 3 [--out r.json]
//
// FLOPs per token are model FLOPs (model/flops.h: 6 x parameters + causal attention), the convention
// the PyTorch peer uses too. Both wall-clock and process-CPU-time rates are reported: on a shared
// machine the CPU-time rate is the one less distorted by other processes.
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <random>
#include <vector>

#include "common/bench_json.h"
#include "herd/core/timer.h"
#include "herd/kernels/gemm.h"
#include "herd/model/flops.h"
#include "herd/nn/model.h"
#include "herd/train/optimizer.h"

namespace {

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Best-of-3 SGEMM rate at a square size large enough to reach the BLAS's peak.
double sgemm_peak(std::int64_t n) {
  std::vector<float> a(static_cast<std::size_t>(n * n), 0.5f), b(a), c(a);
  double best_wall = 0, best_cpu = 0;
  for (int r = 0; r < 3; ++r) {
    herd::Timer t;
    const double c0 = cpu_seconds();
    herd::kernels::gemm<float>(herd::kernels::Trans::kNo, herd::kernels::Trans::kYes, n, n, n, 1.0f, a.data(), n,
                               b.data(), n, 0.0f, c.data(), n);
    const double flops = 2.0 * n * n * n;
    best_wall = std::max(best_wall, flops / t.seconds());
    best_cpu = std::max(best_cpu, flops / (cpu_seconds() - c0));
  }
  (void)best_cpu;
  return best_wall;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"herd training-step benchmark"};
  std::string model_name = "small", out;
  int threads = 1, steps = 3;
  std::int64_t micro_batch = 8, seq_len = 512;
  app.add_option("--model", model_name, "preset")->capture_default_str();
  app.add_option("--threads", threads, "BLAS and OpenMP threads")->capture_default_str();
  app.add_option("--micro-batch", micro_batch, "sequences per step")->capture_default_str();
  app.add_option("--seq-len", seq_len, "tokens per sequence")->capture_default_str();
  app.add_option("--steps", steps, "timed steps (after one warm-up step)")->capture_default_str();
  app.add_option("--out", out, "JSON output file (default: stdout)");
  CLI11_PARSE(app, argc, argv);

  herd::kernels::set_num_threads(threads);
  herd::Result<herd::model::LlamaConfig> cfg = herd::model::preset(model_name);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.error().message().c_str());
    return 1;
  }
  herd::nn::LlamaModel<float> m(*cfg, herd::model::Recompute::kNone, micro_batch, seq_len);
  m.init_weights(1);
  herd::train::AdamW<float> opt(m.param_count());
  herd::kernels::AdamWConfig ac;

  const std::int64_t n = micro_batch * seq_len;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n)), targets(tokens.size()), pos(tokens.size()),
      doc(tokens.size(), 0);
  std::mt19937 rng(1);
  for (std::int64_t i = 0; i < n; ++i) {
    tokens[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(rng() % cfg->vocab);
    targets[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(rng() % cfg->vocab);
    pos[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % seq_len);
  }
  const herd::nn::MicroBatch mb{micro_batch, seq_len, tokens.data(), targets.data(), pos.data(), doc.data()};
  auto step = [&] {
    m.zero_grads();
    const auto l = m.forward_backward(mb, 1.0f / static_cast<float>(n));
    opt.step(m.params(), m.grads(), ac, 1e-4, 1.0);
    return l.loss_sum / static_cast<double>(l.count);
  };
  step();  // warm-up: page in the arena, the BLAS buffers and the thread pool
  std::vector<double> wall, cpu;
  double loss = 0;
  for (int s = 0; s < steps; ++s) {
    herd::Timer t;
    const double c0 = cpu_seconds();
    loss = step();
    wall.push_back(t.seconds());
    cpu.push_back(cpu_seconds() - c0);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  const double med_wall = wall[wall.size() / 2], med_cpu = cpu[cpu.size() / 2];
  const double fpt = *herd::model::train_model_flops_per_token(*cfg, seq_len, herd::model::AttentionMask::causal());
  const double peak = sgemm_peak(2048);

  herd::Json doc_json = herd::bench::envelope("train_step_throughput");
  herd::Json r;
  r["impl"] = "herd";
  r["model"] = model_name;
  r["params"] = m.param_count();
  r["threads"] = threads;
  r["micro_batch"] = micro_batch;
  r["seq_len"] = seq_len;
  r["steps_timed"] = steps;
  r["precision"] = "fp32";
  r["step_s_median"] = med_wall;
  r["tokens_per_s"] = static_cast<double>(n) / med_wall;
  r["tokens_per_cpu_s"] = static_cast<double>(n) / med_cpu * threads;  // per thread-second x threads
  r["model_flops_per_token"] = fpt;
  r["achieved_gflops"] = fpt * static_cast<double>(n) / med_wall / 1e9;
  r["sgemm_peak_gflops"] = peak / 1e9;
  r["fraction_of_sgemm_peak"] = fpt * static_cast<double>(n) / med_wall / peak;
  r["blas"] = herd::kernels::blas_name();
  r["final_loss"] = loss;
  doc_json["results"].push_back(r);
  herd::bench::write_result(doc_json, out);
  return 0;
}
