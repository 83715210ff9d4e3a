// herd's training step throughput on one CPU rank: tokens/s and achieved FLOP/s of full training steps
// (forward, backward, clipping, AdamW) of a preset model, beside the BLAS's own SGEMM peak measured in
// the same process with the same thread count (with --precision bf16 also the peak of the path herd's
// bf16 GEMMs take on this CPU, the one `fraction_of_gemm_peak` is against: oneDNN's bf16 matmul, or the
// SGEMM peak where herd converts bf16 GEMMs to fp32). bench/train/run.sh runs it next to the PyTorch peer
// (torch_peer.py) on the same model and batch.
//
//   herd_bench_train --model small --threads 1 --micro-batch 8 --seq-len 512 --steps 3
//                    [--precision fp32|bf16] [--out r.json]
//
// It times what `herd train` runs on one rank: parallel::RankModel in a one-rank world (a pipeline of
// one chunk: its FSDP units, TP and CP hooks at degree 1) and its optimizer step.
//
// FLOPs per token are model FLOPs (model/flops.h: 6 x parameters + causal attention), the convention
// the PyTorch peer uses too. Both wall-clock and process-CPU-time rates are reported (medians over the
// timed steps): on a shared machine the CPU-time rate is the one less distorted by other processes.
// The SGEMM peak is the better of OpenBLAS and oneDNN (when built in), each called directly with its
// own threading at the same thread count, on a 2048 square; herd's gemm on the same square is reported
// beside it.
#include <cblas.h>
#include <time.h>

#ifdef HERD_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <CLI/CLI.hpp>
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/bench_json.h"
#include "herd/comm/local/local_world.h"
#include "herd/core/aligned.h"
#include "herd/core/check.h"
#include "herd/core/timer.h"
#include "herd/kernels/attention.h"
#include "herd/kernels/convert.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/library_env.h"
#include "herd/kernels/openmp_wait.h"
#include "herd/model/flops.h"
#include "herd/nn/model.h"
#include "herd/parallel/rank_model.h"

namespace {

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct GemmPeak {
  std::string library;
  double wall_gflops = 0;  // best of the repetitions, by wall clock
  double cpu_gflops = 0;   // best of the repetitions, per CPU-second of the process
};

// Best of 5 square (n, n, n) SGEMMs of `run`.
template <typename F>
GemmPeak best_of(const std::string& name, std::int64_t n, F run) {
  // Cache-line-aligned, as the trainer's tensors are (core/aligned.h).
  herd::AlignedVector<float> a(static_cast<std::size_t>(n * n), 0.5f), b(a), c(a);
  GemmPeak p;
  p.library = name;
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  for (int r = 0; r < 5; ++r) {
    herd::Timer t;
    const double c0 = cpu_seconds();
    run(a.data(), b.data(), c.data());
    p.wall_gflops = std::max(p.wall_gflops, flops / t.seconds() / 1e9);
    p.cpu_gflops = std::max(p.cpu_gflops, flops / (cpu_seconds() - c0) / 1e9);
  }
  return p;
}

// The libraries' own SGEMM peaks with their own threading at this thread count (OpenBLAS's pthreads,
// oneDNN's OpenMP), called directly, and herd's gemm (which splits across its OpenMP team and calls
// the libraries single-threaded; kernels/gemm.h) on the same square.
std::vector<GemmPeak> sgemm_peaks(int threads, std::int64_t n) {
  const int ni = static_cast<int>(n);
  std::vector<GemmPeak> peaks;
  openblas_set_num_threads(threads);
  peaks.push_back(best_of("OpenBLAS", n, [&](const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a, ni, b, ni, 0.0f, c, ni);
  }));
  openblas_set_num_threads(1);  // herd's setting (kernels/cpu/gemm.cpp)
#ifdef HERD_HAVE_DNNL
  peaks.push_back(best_of("oneDNN", n, [&](const float* a, const float* b, float* c) {
    HERD_CHECK(dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n) == dnnl_success, "dnnl_sgemm");
  }));
#endif
  peaks.push_back(best_of("herd gemm", n, [&](const float* a, const float* b, float* c) {
    herd::kernels::gemm<float>(herd::kernels::Trans::kNo, herd::kernels::Trans::kNo, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                               n);
  }));
  return peaks;
}

// Whether herd's bf16 GEMMs run as oneDNN bf16 matmuls here; else they are converted to fp32 and run
// as fp32 GEMMs (no bf16 instructions, oneDNN held below them, or built without oneDNN; kernels/gemm.h).
bool bf16_on_onednn() { return herd::kernels::bf16_gemm_path() == herd::kernels::Bf16GemmPath::kOneDNN; }

// The bf16 GEMM peak of the path herd's bf16 step takes. On oneDNN's: its bf16 matmul (bf16 in, fp32
// out) with its own OpenMP threading, called directly. Converted: the step's GEMMs are fp32 GEMMs, whose
// peak is sgemm_peaks' (the caller takes it from there). herd's gemm_bf16 on the same square either way.
std::vector<GemmPeak> bf16_peaks(std::int64_t n) {
  herd::AlignedVector<herd::bf16> a16(static_cast<std::size_t>(n * n)), b16(a16.size());
  {
    const std::vector<float> f(a16.size(), 0.5f);
    herd::kernels::to_bf16(f.data(), n * n, a16.data());
    herd::kernels::to_bf16(f.data(), n * n, b16.data());
  }
  std::vector<GemmPeak> peaks;
#ifdef HERD_HAVE_DNNL
  if (bf16_on_onednn()) {
    using dt = dnnl::memory::data_type;
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(eng);
    const dnnl::memory::desc ad({n, n}, dt::bf16, {n, 1}), cd({n, n}, dt::f32, {n, 1});
    const dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, ad, cd), eng));
    peaks.push_back(best_of("oneDNN bf16 matmul", n, [&](const float*, const float*, float* c) {
      dnnl::memory am(ad, eng, a16.data()), bm(ad, eng, b16.data()), cm(cd, eng, c);
      mm.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      stream.wait();
    }));
  }
#endif
  peaks.push_back(best_of("herd gemm_bf16", n, [&](const float*, const float*, float* c) {
    herd::kernels::gemm_bf16(herd::kernels::Trans::kNo, herd::kernels::Trans::kNo, n, n, n, 1.0f, a16.data(), n,
                             b16.data(), n, 0.0f, c, n);
  }));
  return peaks;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  herd::kernels::settle_library_env(argv);  // as herd itself does: the libraries read it when they load
  CLI::App app{"herd training-step benchmark"};
  std::string model_name = "small", out;
  int threads = 1, steps = 3;
  std::int64_t micro_batch = 8, seq_len = 512;
  app.add_option("--model", model_name, "preset")->capture_default_str();
  app.add_option("--threads", threads, "BLAS and OpenMP threads")->capture_default_str();
  app.add_option("--micro-batch", micro_batch, "sequences per step")->capture_default_str();
  app.add_option("--seq-len", seq_len, "tokens per sequence")->capture_default_str();
  app.add_option("--steps", steps, "timed steps (after one warm-up step)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string precision = "fp32";
  app.add_option("--precision", precision,
                 "fp32, or bf16 (train.precision = bf16: bf16 weight copies and matmul inputs, fp32 master and "
                 "optimizer)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--out", out, "JSON output file (default: stdout)");
  CLI11_PARSE(app, argc, argv);
  const bool bf16 = precision == "bf16";

  herd::kernels::set_num_threads(threads);
  herd::Result<herd::model::LlamaConfig> cfg = herd::model::preset(model_name);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.error().message().c_str());
    return 1;
  }
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
  herd::kernels::AdamWConfig ac;
  std::vector<double> wall, cpu;
  double loss = 0;
  std::int64_t param_count = 0;
  // Runs `step` once to warm up (page in the arena, the BLAS buffers and the thread pool), then times it.
  auto time_steps = [&](const std::function<double()>& step) {
    step();
    for (int s = 0; s < steps; ++s) {
      herd::Timer t;
      const double c0 = cpu_seconds();
      loss = step();
      wall.push_back(t.seconds());
      cpu.push_back(cpu_seconds() - c0);
    }
  };
  {
    herd::comm::LocalWorld world(1, herd::comm::CommOptions{});
    const std::vector<herd::Status> st = world.run([&](herd::comm::Communicator& w) -> herd::Status {
      herd::kernels::set_num_threads(threads);  // OpenMP's team size is per thread, as in train/job/job.cpp
      HERD_ASSIGN_OR_RETURN(herd::topology::ParallelDims dims, herd::topology::ParallelDims::make(1, 1, 1, 1, 1));
      HERD_ASSIGN_OR_RETURN(auto groups, herd::parallel::ParallelGroups::make(w, dims));
      herd::parallel::ParallelContext ctx = groups->context();
      ctx.precision = bf16 ? herd::Precision::kBF16 : herd::Precision::kFP32;
      herd::parallel::RankModelOptions o;
      o.recompute = herd::model::Recompute::kNone;
      o.micro_batch = micro_batch;
      o.seq_len = seq_len;
      HERD_ASSIGN_OR_RETURN(auto model, herd::parallel::RankModel<float>::make(ctx, *cfg, o));
      herd::parallel::RankModel<float>& m = *model;
      m.init_weights(1);
      param_count = m.full_param_count();
      herd::Status failed = herd::Status::Ok();
      time_steps([&] {
        m.zero_grads();
        herd::Result<herd::kernels::CrossEntropyLoss> l = m.forward_backward_step({mb}, 1.0f / static_cast<float>(n));
        herd::Result<double> norm = l.ok() ? m.step(ac, 1e-4, 1.0) : herd::Result<double>(l.error());
        if (!norm.ok()) failed = norm.error();
        return l.ok() ? l->loss_sum / static_cast<double>(l->count) : 0.0;
      });
      return failed;
    });
    if (!st[0].ok()) {
      std::fprintf(stderr, "%s\n", st[0].error().message().c_str());
      return 1;
    }
  }
  const double med_wall = median(wall), med_cpu = median(cpu);
  const double fpt = *herd::model::train_model_flops_per_token(*cfg, seq_len, herd::model::AttentionMask::causal());
  // The step's FLOP rate by both clocks; the CPU-time one is per thread-second x threads, the rate
  // the step would have with its threads' cores to itself.
  const double step_flops = fpt * static_cast<double>(n);
  const double gflops_wall = step_flops / med_wall / 1e9;
  const double gflops_cpu = step_flops / med_cpu * threads / 1e9;

  // The peaks, measured after the steps. A peak below the step's own rate means another process took
  // a core while it was measured (a fraction above 100% is no figure): measure again, up to three
  // times, keeping each library's best.
  std::vector<GemmPeak> peaks, peaks16;
  auto keep_best = [](std::vector<GemmPeak>& kept, const std::vector<GemmPeak>& now) {
    if (kept.empty()) {
      kept = now;
      return;
    }
    for (std::size_t i = 0; i < now.size(); ++i)
      if (now[i].cpu_gflops > kept[i].cpu_gflops) kept[i] = now[i];
  };
  // The peak of the library calls the step's GEMMs make: oneDNN's bf16 matmul, or (fp32, or bf16
  // converted to fp32) the sgemm one.
  const bool peak_is_bf16 = bf16 && bf16_on_onednn();
  auto own_wall_peak = [&] {
    double w = 0;
    for (const GemmPeak& p : peak_is_bf16 ? peaks16 : peaks)
      if (p.library != "herd gemm" && p.library != "herd gemm_bf16") w = std::max(w, p.wall_gflops);
    return w;
  };
  int peak_attempts = 0;
  do {
    ++peak_attempts;
    keep_best(peaks, sgemm_peaks(threads, 2048));
    if (bf16) keep_best(peaks16, bf16_peaks(2048));
  } while (peak_attempts < 3 && own_wall_peak() < gflops_wall);

  // The BLAS peak the step is held against: the better library on its own (not herd's wrapper).
  GemmPeak best;
  herd::Json peaks_json = herd::Json::array();
  for (const GemmPeak& p : peaks) {
    peaks_json.push_back({{"library", p.library},
                          {"n", 2048},
                          {"wall_gflops", p.wall_gflops},
                          {"gflops_per_cpu_s_x_threads", p.cpu_gflops * threads}});
    if (p.library != "herd gemm" && p.cpu_gflops > best.cpu_gflops) best = p;
  }

  // The GEMM peak of the step's own precision: the sgemm one for fp32, the bf16 matmul's for bf16.
  GemmPeak best16;
  herd::Json peaks16_json = herd::Json::array();
  if (bf16) {
    for (const GemmPeak& p : peaks16) {
      peaks16_json.push_back({{"library", p.library},
                              {"n", 2048},
                              {"wall_gflops", p.wall_gflops},
                              {"gflops_per_cpu_s_x_threads", p.cpu_gflops * threads}});
      if (p.library != "herd gemm_bf16" && p.cpu_gflops > best16.cpu_gflops) best16 = p;
    }
    if (!peak_is_bf16) {
      best16 = best;
      best16.library = best.library + " sgemm (herd runs bf16 GEMMs converted to fp32 here)";
    }
  }
  const GemmPeak& own = bf16 ? best16 : best;

  herd::Json doc_json = herd::bench::envelope("train_step_throughput");
  herd::Json r;
  r["impl"] = "herd";
  r["model"] = model_name;
  r["params"] = param_count;
  r["threads"] = threads;
  r["micro_batch"] = micro_batch;
  r["seq_len"] = seq_len;
  r["steps_timed"] = steps;
  r["peak_attempts"] = peak_attempts;
  r["precision"] = precision;
  r["step_s"] = wall;
  r["step_cpu_s"] = cpu;
  r["step_s_median"] = med_wall;
  r["step_cpu_s_median"] = med_cpu;
  r["tokens_per_s"] = static_cast<double>(n) / med_wall;
  r["tokens_per_cpu_s"] = static_cast<double>(n) / med_cpu * threads;  // per thread-second x threads
  r["model_flops_per_token"] = fpt;
  r["achieved_gflops"] = gflops_wall;
  r["achieved_gflops_cpu_time"] = gflops_cpu;
  r["sgemm_peaks"] = peaks_json;
  r["sgemm_peak_library"] = best.library;
  r["sgemm_peak_gflops"] = best.wall_gflops;
  r["sgemm_peak_gflops_cpu_time"] = best.cpu_gflops * threads;
  // Like with like: wall rate over the wall peak (both measured in this process, seconds apart), and
  // CPU-time rate over the CPU-time peak (less distorted when other jobs share the cores).
  r["fraction_of_sgemm_peak"] = gflops_wall / best.wall_gflops;
  r["fraction_of_sgemm_peak_cpu_time"] = gflops_cpu / (best.cpu_gflops * threads);
  // The same against the GEMM peak of the step's precision (bf16: the bf16 matmul's).
  herd::Json gemm_peaks = peak_is_bf16 ? peaks16_json : peaks_json;
  if (bf16 && !peak_is_bf16) {
    for (const herd::Json& p : peaks16_json) gemm_peaks.push_back(p);  // herd's gemm_bf16 beside the sgemm peaks
  }
  r["gemm_peaks"] = gemm_peaks;
  r["gemm_peak_library"] = own.library;
  r["gemm_peak_gflops"] = own.wall_gflops;
  r["gemm_peak_gflops_cpu_time"] = own.cpu_gflops * threads;
  r["fraction_of_gemm_peak"] = gflops_wall / own.wall_gflops;
  r["fraction_of_gemm_peak_cpu_time"] = gflops_cpu / (own.cpu_gflops * threads);
  if (bf16) {
    r["bf16_gemm"] = herd::kernels::bf16_gemm_description();  // the path gemm_peak_library measured
    r["bf16_attention"] = herd::kernels::bf16_attention_description();
  }
  r["blas"] = herd::kernels::blas_name();
  r["openmp_wait"] = herd::kernels::openmp_wait_description();
  r["blas_kernels"] = herd::kernels::blas_core_description();
  r["gemm_policy"] =
      herd::kernels::have_onednn() ? "auto (oneDNN for non-transposed A on 1 thread, else OpenBLAS)" : "OpenBLAS";
  r["final_loss"] = loss;
  doc_json["results"].push_back(r);
  herd::bench::write_result(doc_json, out);
  return 0;
}
