// herd calibrate: measures this machine running herd's own kernels and `local` communicator and writes
// the `local-cpu` cluster the planner and the "planned vs measured" lines of `herd train` use.
//
// Measured (the median of several repeats, one core unless said): fp32 GEMM at the linear shapes of the model's
// layers and head (forward, dgrad and wgrad transposes) on one thread and on all cores (-> the per-core
// peak, and the GEMM's thread scaling, the fallback of the training step's below); herd's flash attention forward and
// backward (-> attention efficiencies: the planner's causal FLOPs over time x the GEMM rate); RMSNorm forward +
// backward (-> the streaming bandwidth of herd's elementwise kernels); a 16^3 GEMM (-> per-op overhead); and
// all-reduce, all-gather, reduce-scatter and send/recv of the local communicator at three sizes on 2 and 4 thread
// ranks. The communicator's latency and bandwidth are a least-squares fit of the planner's own collective
// formulas (core/collective_bw.h, measure/comm_fit.h) to the 2-rank runs; the table then shows the fitted
// model next to every measurement, 4-rank runs included (predicted through host_share: those ranks
// time-slice the cores). Last, a real single-rank training step on one thread against the planner's
// projection of it from those kernel rates: their ratio, the runtime efficiency, derates every compute
// rate; the same step on all cores (its speed-up over one thread -> thread_scaling); and the same work per rank on two
// thread ranks (DP = 2), communication taken out: the multi-rank efficiency; rank 0's wait in that step beyond its
// collectives' cost, over its compute, is the rank skew (accelerator.speed_variation). bf16 (`train.precision = bf16`)
// the same way: gemm_bf16 at the same shapes (-> peak_tflops.bf16), the bf16 block's attention (the bf16 kernel,
// rounded outputs) against it, and a single-rank bf16 step against its kernel-only projection (-> accelerator.bf16's
// efficiencies, which the planner uses for a bf16 run; topology::at_precision). Every measurement above is taken
// several times and the best take kept; a take that ran beside other jobs (the /proc accounting around it, wall-clock
// measurements) or gave an implausible result (a thread scaling far below 1, a rate far from this machine's last
// calibration of the same shapes) is redone, a bounded number of times, and one line says what was redone and why
// (measure/steady.h). The file records when it was taken, on which host and CPU, the load average and the other
// runnable processes at the time, and every take. Without --out it is this machine's stored calibration
// (train/calibration_store.h), which `herd train` then uses by default.
// Just before and after the reference steps, the host speed probe (train/host_speed.h): their mean is
// recorded, and `herd train` plans at the ratio of its own probe to it.
// The committed preset's numbers came from this command; docs/projection.md. The timers, the communicator's
// timing and fit and the host readers are measure/'s; the kernel and communicator stage is
// cli/calibrate_kernels.{h,cpp}; this file runs it, then the reference steps, and writes the cluster.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>

#include "herd/cli/app.h"
#include "herd/cli/calibrate_device.h"
#include "herd/cli/calibrate_kernels.h"
#include "herd/cli/table.h"
#include "herd/core/cores.h"
#include "herd/core/file_write.h"
#include "herd/core/format.h"
#include "herd/core/json_text.h"
#include "herd/core/log.h"
#include "herd/kernels/gemm.h"
#include "herd/measure/comm_fit.h"
#include "herd/measure/host.h"
#include "herd/measure/machine.h"
#include "herd/measure/steady.h"
#include "herd/model/config.h"
#include "herd/planner/cost.h"
#include "herd/topology/cluster.h"
#include "herd/train/calibration_store.h"
#include "herd/train/dist_model.h"
#include "herd/train/host_speed.h"
#include "herd/train/launch.h"
#include "herd/train/projection.h"
#include "herd/train/trainer.h"

namespace herd::cli {

namespace {

using calibration::AttentionRates;
using calibration::CalibrateOptions;
using calibration::CommCalibration;
using calibration::far_from_last;
using calibration::GemmRates;
using calibration::kLowestScaling;
using calibration::Session;

// This machine's last calibration of the same model and shapes, to compare rates with; nullopt when
// there is none (or --previous none). A comparison that cannot be read is no comparison, said once.
// `at_out`: the calibration at `out` when it was already read (--if-missing), not read again.
std::optional<train::StoredCalibration> previous_calibration(const CalibrateOptions& o, const std::string& out,
                                                             const std::string& shape,
                                                             std::optional<train::StoredCalibration> at_out) {
  if (o.previous == "none") return std::nullopt;
  const std::string path = o.previous.empty() ? out : o.previous;
  Result<train::StoredCalibration> c = Error("");
  if (at_out && path == out) {
    c = std::move(*at_out);
  } else {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    c = train::read_calibration(path);
  }
  if (!c.ok()) {
    log_warning("calibrate: not comparing with ", path, ": ", c.error().message());
    return std::nullopt;
  }
  const Json& r = c->record;
  if (!r.contains("shape") || !r["shape"].is_string() || r["shape"].get<std::string>() != shape) return std::nullopt;
  return std::move(*c);
}

// Random documents of the model's vocabulary, enough for `tokens` tokens.
std::shared_ptr<const data::TokenDocuments> random_documents(std::int64_t vocab, std::int64_t tokens) {
  auto docs = std::make_shared<data::TokenDocuments>();
  docs->vocab_size = vocab;
  std::mt19937 rng(7);
  for (std::int64_t n = 0; n < tokens;) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(64 + rng() % 512));
    for (auto& t : ids) t = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab));
    n += static_cast<std::int64_t>(ids.size());
    docs->add_doc(ids);
  }
  return docs;
}

struct ReferenceStep {
  double step_s = 0;  // median step (the first left out)
  double comm_s = 0;  // median time inside the communicator per step (the distributed path only)
  double loss = 0;    // the last step's loss: the same documents in both precisions, so bf16's differs
};

// `steps` + 1 training steps of `m` on random documents (the first is warm-up), `threads` kernel threads
// per rank, `micro_batch` sequences per rank, through the trainer of `herd train`: ranks = 1 is a one-rank
// job; 2 is DP = 2 on the local communicator, two thread ranks each doing the single rank's work.
Result<ReferenceStep> reference_step(const model::LlamaConfig& m, std::int64_t micro_batch, std::int64_t seq_len,
                                     int steps, int ranks, const std::string& precision = "fp32", int threads = 1) {
  const auto docs = random_documents(m.vocab, 4 * (steps + 1) * ranks * micro_batch * seq_len);
  train::TrainConfig cfg;
  cfg.data.seq_len = seq_len;
  cfg.train.global_batch = ranks * micro_batch;
  cfg.parallel.dp = ranks;
  cfg.parallel.microbatch = micro_batch;
  cfg.train.steps = steps + 1;
  cfg.train.threads = threads;
  cfg.schedule.warmup_steps = 1;
  cfg.eval.every = 0;
  cfg.eval.batches = 1;
  cfg.train.precision = precision;
  train::JobResult<float> r;
  r.quiet = true;
  HERD_RETURN_IF_ERROR(
      train::run_local_job<float>(cfg, m, {docs, nullptr}, train::distributed_llama_factory<float>(), &r, 0, false));
  const train::MeasuredRun run = train::measured_run(r.history, {});
  return ReferenceStep{run.step_s, std::max(0.0, run.comm_s), r.history.empty() ? 0.0 : r.history.back().loss};
}

// The runtime around the kernels: real training steps through the trainer of `herd train`, each kept as
// the median of its undisturbed takes. Unlike the kernel rates (on the thread's CPU clock, where the
// fastest take is the machine's rate), a plan is for a run's median step, what `herd train` reports, and
// on a shared host the best of several runs is faster than a typical one. Neither reference is a layout of
// bench/projection: every row there is a prediction.
struct ReferenceSteps {
  ReferenceStep one;        // 1 rank, 1 thread, fp32
  ReferenceStep all_cores;  // 1 rank on every core (step_s 0 on one core)
  bool all_cores_disturbed = false;
  ReferenceStep two_ranks;                   // DP = 2, the same work per rank
  ReferenceStep bf16;                        // 1 rank, 1 thread, bf16
  double probe_before = 0, probe_after = 0;  // the host speed probe around them (train/host_speed.h)
};

ReferenceStep median_take(const measure::SteadyResult& sr, const std::vector<ReferenceStep>& takes) {
  std::vector<ReferenceStep> clean;
  for (std::size_t i = 0; i < takes.size() && i < sr.takes.size(); ++i) {
    if (sr.disturbed || sr.takes[i].disturbed.empty()) clean.push_back(takes[i]);
  }
  if (clean.empty()) return ReferenceStep{};
  std::sort(clean.begin(), clean.end(),
            [](const ReferenceStep& a, const ReferenceStep& b) { return a.step_s - a.comm_s < b.step_s - b.comm_s; });
  const ReferenceStep& lo = clean[(clean.size() - 1) / 2];
  const ReferenceStep& hi = clean[clean.size() / 2];
  return ReferenceStep{0.5 * (lo.step_s + hi.step_s), 0.5 * (lo.comm_s + hi.comm_s), lo.loss};
}

Result<ReferenceSteps> measure_reference_steps(Session& s) {
  Status failed = Status::Ok();
  // Each take is a short training run on the wall clock, redone when other jobs ran beside it.
  auto measure_step = [&](const std::string& what, int ranks, const char* precision, int threads,
                          const measure::PlausibleFn& plausible, bool* disturbed = nullptr) {
    std::vector<ReferenceStep> takes;
    const measure::SteadyResult& sr = s.measure(
        what, true,
        [&] {
          Result<ReferenceStep> r = reference_step(s.m, s.o.micro_batch, s.o.seq_len, 5, ranks, precision, threads);
          if (!r.ok()) {
            failed = r.error();
            return 1e9;
          }
          takes.push_back(*r);
          return r->step_s - (ranks > 1 ? r->comm_s : 0.0);
        },
        plausible);
    if (disturbed) *disturbed = sr.disturbed;
    return median_take(sr, takes);
  };
  ReferenceSteps r;
  // The host's speed around the reference steps, which anchor every plan: `herd train` probes the same
  // way and plans at the ratio (train/host_speed.h).
  r.probe_before = train::probe_host_flops(s.cores);
  r.one = measure_step("training step, 1 rank", 1, "fp32", 1, [&](double secs) {
    return far_from_last("reference step", secs, s.last_step("reference_step_s"), s.last_taken_at());
  });
  // The same one-rank step on every core: its speed-up over the one-thread step is the thread scaling of
  // a training step, which a one-rank plan on several threads needs. Taken from the all-core GEMM alone it
  // moved 0.72 -> 0.93 between two calibrations minutes apart while the two-thread steps did not
  // (bench/projection/measurements.md): one wall-clock GEMM burst is a poor anchor for a whole step.
  if (failed.ok() && s.cores > 1) {
    r.all_cores = measure_step(
        "training step, 1 rank, all cores", 1, "fp32", s.cores,
        [&](double secs) -> std::string {
          const double sc = (r.one.step_s / secs - 1.0) / static_cast<double>(s.cores - 1);
          if (sc >= kLowestScaling) return "";
          return "step thread scaling " + format_fixed(sc, 2) + " far below 1";
        },
        &r.all_cores_disturbed);
  }
  if (failed.ok()) {
    r.two_ranks = measure_step("training step, 2 ranks (DP), communication out", 2, "fp32", 1, [&](double secs) {
      const double eff = r.one.step_s / secs;
      return eff >= kLowestScaling ? std::string() : "multi-rank efficiency " + format_fixed(eff, 2) + " far below 1";
    });
  }
  // The bf16 runtime around its kernels, the same way: a single-rank bf16 step.
  if (failed.ok()) {
    r.bf16 = measure_step("training step, 1 rank, bf16", 1, "bf16", 1, [&](double secs) {
      return far_from_last("bf16 reference step", secs, s.last_step("reference_step_bf16_s"), s.last_taken_at());
    });
  }
  r.probe_after = train::probe_host_flops(s.cores);
  kernels::set_num_threads(1);
  if (!failed.ok()) return failed.error().with_context("reference training step");
  return r;
}

// What the reference steps make of the kernel-rate cluster: the ratio of the planner's projection of the
// one-rank step from the kernel rates to the measured step (the model's copies and layout changes, cold
// caches between layers, the loss and optimizer passes as herd runs them) derates every compute rate, in
// fp32 and in bf16; the all-core step gives the thread scaling; the two-rank step the multi-rank
// efficiency and the rank skew.
struct RuntimeFit {
  double kernels_only_s = 0, bf16_kernels_only_s = 0;  // the planner's one-rank steps from the kernel rates
  double efficiency = 0, bf16_efficiency = 0;
  double thread_scaling = 0;
  bool step_scaling = false;  // thread_scaling from the all-core step (else the GEMM's, or the preset's)
  double planned_two_rank_comm_s = 0, rank_wait_s = 0;
};

Result<RuntimeFit> fit_runtime(const Session& s, const ReferenceSteps& ref, double gemm_scaling, bool idle,
                               topology::Cluster& c) {
  RuntimeFit f;
  train::ResolvedLayout one;
  one.layout.microbatch = s.o.micro_batch;
  one.spec.seq_len = s.o.seq_len;
  one.spec.global_batch = s.o.micro_batch;
  one.spec.precision = planner::Precision::kFP32;
  Result<train::Projection> kernel_plan = train::project(s.m, one, /*threads=*/1, c);
  if (!kernel_plan.ok()) return kernel_plan.error().with_context("reference projection");
  f.kernels_only_s = kernel_plan->step_s();
  f.efficiency = std::clamp(f.kernels_only_s / ref.one.step_s, 0.05, 1.0);
  train::ResolvedLayout one16 = one;
  one16.spec.precision = planner::Precision::kBF16;
  Result<train::Projection> kernel_plan16 = train::project(s.m, one16, /*threads=*/1, c);
  if (!kernel_plan16.ok()) return kernel_plan16.error().with_context("bf16 reference projection");
  f.bf16_kernels_only_s = kernel_plan16->step_s();
  f.bf16_efficiency = std::clamp(f.bf16_kernels_only_s / ref.bf16.step_s, 0.05, 1.0);
  // The thread scaling a one-rank plan uses: from the all-core training step when it ran on a quiet host,
  // else the GEMM's (itself the preset's when other jobs ran).
  f.step_scaling = idle && s.cores > 1 && ref.all_cores.step_s > 0 && !ref.all_cores_disturbed;
  f.thread_scaling =
      f.step_scaling
          ? std::clamp((ref.one.step_s / ref.all_cores.step_s - 1.0) / static_cast<double>(s.cores - 1), 0.05, 1.0)
          : gemm_scaling;
  topology::Accelerator& a = c.accelerator;
  a.thread_scaling = f.thread_scaling;
  a.bf16_matmul_efficiency = f.bf16_efficiency;
  a.bf16_attention_fwd_efficiency = std::min(1.0, a.bf16_attention_fwd_efficiency * f.bf16_efficiency);
  a.bf16_attention_bwd_efficiency = std::min(1.0, a.bf16_attention_bwd_efficiency * f.bf16_efficiency);
  a.bf16_memory_bw_efficiency = f.bf16_efficiency;
  a.matmul_efficiency = f.efficiency;
  a.attention_fwd_efficiency = std::min(1.0, a.attention_fwd_efficiency * f.efficiency);
  a.attention_bwd_efficiency = std::min(1.0, a.attention_bwd_efficiency * f.efficiency);
  a.memory_bw_efficiency = f.efficiency;
  // The same work per rank on two thread ranks of the distributed runtime (DP = 2), rank 0's time
  // inside the communicator taken out: a multi-rank job's ranks compute at this fraction of the
  // single-rank rates (the runtime around the kernels, ranks sharing one process and the memory
  // system); their collectives are the network tier's.
  const double dist_compute = std::max(1e-9, ref.two_ranks.step_s - ref.two_ranks.comm_s);
  a.multi_rank_efficiency = std::clamp(ref.one.step_s / dist_compute, 0.05, 1.0);
  // Rank skew: rank 0's time inside the communicator beyond what its collectives cost (the fitted
  // ring model of the same step) is waiting at a rendezvous for the other rank, whose pace on this host
  // wanders (the cores are time-shared with the hypervisor and other guests). The planner charges a
  // synchronous job compute x sigma x sqrt(2 ln G) for it (planner/estimate.cpp, `speed_variation`),
  // so sigma is that wait over the compute, divided by sqrt(2 ln 2) for these two ranks.
  train::ResolvedLayout dp2 = one;
  dp2.layout.dp = 2;
  dp2.spec.global_batch = 2 * s.o.micro_batch;
  topology::Cluster no_skew = c;
  no_skew.accelerator.speed_variation = 0;
  Result<train::Projection> p2 = train::project(s.m, dp2, /*threads=*/1, no_skew);
  if (!p2.ok()) return p2.error().with_context("two-rank reference projection");
  f.planned_two_rank_comm_s = p2->estimate.time.exposed_comm_s();
  f.rank_wait_s = std::max(0.0, ref.two_ranks.comm_s - f.planned_two_rank_comm_s);
  a.speed_variation = std::clamp(f.rank_wait_s / dist_compute / std::sqrt(2.0 * std::log(2.0)), 0.0, 0.3);
  return f;
}

// Everything one calibration measured and derived, for its report and its record.
struct Measured {
  GemmRates gemm;
  double gemm_scaling = 0;  // the all-core GEMM's thread scaling (the preset's when the host was not idle)
  double background = 0;    // other jobs sharing the cores (measured or declared)
  bool idle = false;        // no other jobs and the all-core GEMM undisturbed
  AttentionRates attention;
  double stream = 0, overhead_us = 0;
  CommCalibration comm;
  ReferenceSteps ref;
  RuntimeFit fit;
};

// The table's rows for the reference steps and the communicator (each sample against the fitted link),
// the table, the one-line summary and what was disturbed; returns the communicator samples for the record.
Json report(Session& s, const topology::Cluster& c, const Measured& x) {
  const topology::Accelerator& a = c.accelerator;
  const ReferenceSteps& ref = x.ref;
  const RuntimeFit& fit = x.fit;
  const std::string shape = std::to_string(s.o.micro_batch) + "x" + std::to_string(s.o.seq_len);
  s.table.add({"training step (1 rank, 1 thread)", shape, format_fixed(1e3 * ref.one.step_s, 1) + " ms",
               "kernels alone " + format_fixed(1e3 * fit.kernels_only_s, 1) + " ms: runtime " +
                   format_fixed(100 * fit.efficiency, 1) + "%"});
  if (ref.all_cores.step_s > 0) {
    s.table.add({"training step (1 rank, " + std::to_string(s.cores) + " threads)", shape,
                 format_fixed(1e3 * ref.all_cores.step_s, 1) + " ms",
                 "thread scaling " +
                     format_fixed((ref.one.step_s / ref.all_cores.step_s - 1.0) / static_cast<double>(s.cores - 1), 2) +
                     " (GEMM " + format_fixed(x.gemm_scaling, 2) + ")"});
  }
  s.table.add({"training step (1 rank, 1 thread), bf16", shape, format_fixed(1e3 * ref.bf16.step_s, 1) + " ms",
               "kernels alone " + format_fixed(1e3 * fit.bf16_kernels_only_s, 1) + " ms: runtime " +
                   format_fixed(100 * fit.bf16_efficiency, 1) + "%"});
  s.table.add({"same per rank, 2 ranks (DP)", shape, format_fixed(1e3 * ref.two_ranks.step_s, 1) + " ms",
               "comm " + format_fixed(1e3 * ref.two_ranks.comm_s, 1) + " ms: multi-rank " +
                   format_fixed(100 * a.multi_rank_efficiency, 1) + "%"});
  s.table.add({"  of which waiting for the other rank", shape, format_fixed(1e3 * fit.rank_wait_s, 1) + " ms",
               "collectives " + format_fixed(1e3 * fit.planned_two_rank_comm_s, 1) + " ms: speed_variation " +
                   format_fixed(100 * a.speed_variation, 1) + "%"});
  Json raw = Json::array();
  for (const measure::CommSample& cs : x.comm.samples) {
    topology::Cluster storage;
    const topology::Cluster& sh = topology::host_share(c, cs.ranks, &storage);
    Result<topology::GroupLink> link = topology::link_for_group(sh, 1, cs.ranks);
    const double pred = link.ok() ? cs.steps * link->latency_s + cs.volume / link->bw_bytes_per_s : 0;
    s.table.add({cs.op + " x" + std::to_string(cs.ranks), format_bytes(cs.bytes),
                 format_fixed(1e6 * cs.seconds, 1) + " us", "model " + format_fixed(1e6 * pred, 1) + " us"});
    raw.push_back(
        {{"op", cs.op}, {"ranks", cs.ranks}, {"bytes", cs.bytes}, {"seconds", cs.seconds}, {"model_s", pred}});
  }
  s.table.print(std::cout);
  std::cout << "\nper core: GEMM " << format_fixed(x.gemm.one_thread / 1e9, 1) << " GFLOP/s (all " << s.cores
            << " cores " << format_fixed(x.gemm.all_cores / 1e9, 1) << "; thread_scaling "
            << format_fixed(fit.thread_scaling, 2)
            << (fit.step_scaling ? " from the training step on all cores, GEMM " + format_fixed(x.gemm_scaling, 2)
                : x.idle         ? " from the GEMM: the all-core training step was disturbed"
                                 : " kept from the preset: " + (x.gemm.all_cores_disturbed
                                                                    ? std::string("the all-core GEMM was disturbed")
                                                                    : format_fixed(x.background, 1) + " background jobs"))
            << "); attention " << format_fixed(100 * x.attention.fwd, 1) << "% / "
            << format_fixed(100 * x.attention.bwd, 1) << "%; elementwise " << format_fixed(x.stream / 1e9, 1)
            << " GB/s; op overhead " << format_fixed(x.overhead_us, 2) << " us; bf16: GEMM "
            << format_fixed(x.gemm.bf16_one_thread / 1e9, 1) << " GFLOP/s (" << kernels::bf16_gemm_description()
            << "), attention " << format_fixed(100 * x.attention.bf16_fwd, 1) << "% / "
            << format_fixed(100 * x.attention.bf16_bwd, 1) << "%, runtime "
            << format_fixed(100 * fit.bf16_efficiency, 1) << "%; runtime efficiency "
            << format_fixed(100 * fit.efficiency, 1) << "% (multi-rank "
            << format_fixed(100 * a.multi_rank_efficiency, 1) << "%, speed variation "
            << format_fixed(100 * a.speed_variation, 1) << "%); local comm " << format_fixed(c.tiers[0].bw_gb_per_s, 2)
            << " GB/s, " << format_fixed(c.tiers[0].latency_us, 1) << " us per step\n";
  // One line on what was disturbed and redone (or could not be redone clean), nothing when all was quiet.
  std::string redone, still;
  for (const measure::SteadyResult& r : s.steady) {
    if (r.disturbed_takes() > 0) (r.disturbed ? still : redone) += std::string(" | ") + r.line();
  }
  if (!redone.empty()) std::cout << "disturbed and redone:" << redone.substr(2) << "\n";
  if (!still.empty()) {
    std::cout << "warning: disturbed in every take, the best kept (the plans will be off; calibrate again on a "
                 "quiet host):"
              << still.substr(2) << "\n";
  }
  return raw;
}

// The host around the calibration: when, the load and the other runnable processes at its start.
struct HostAtStart {
  double unix_s = 0, load_average = 0;
  std::string loadavg;
  std::vector<std::string> runnable;
};

// The file's "calibration" object: what was run, on which host and build, the load around it, every take
// and the rates behind the cluster (train/calibration_store.h reads it back).
Json calibration_record(const Session& s, const train::MachineKey& machine, const std::string& shape_key,
                        const HostAtStart& start, const Measured& x, Json comm_samples) {
  const CalibrateOptions& o = s.o;
  Json measurements = Json::array();
  bool any_disturbed = false;
  for (const measure::SteadyResult& r : s.steady) {
    Json takes = Json::array();
    for (const measure::Take& tk : r.takes) {
      takes.push_back({{"seconds", tk.seconds}, {"background_jobs", tk.background}, {"disturbed", tk.disturbed}});
    }
    measurements.push_back({{"what", r.what}, {"seconds", r.seconds}, {"disturbed", r.disturbed}, {"takes", takes}});
    any_disturbed = any_disturbed || r.disturbed;
  }
  const std::string command =
      "herd calibrate --model " + o.model + " --micro-batch " + std::to_string(o.micro_batch) + " --seq-len " +
      std::to_string(o.seq_len) +
      (o.background_jobs >= 0 ? " --background-jobs " + format_fixed(o.background_jobs, 1) : "");
  Json runnable = Json::array();
  for (const std::string& p : start.runnable) runnable.push_back(p);
  Json runnable_after = Json::array();
  for (const std::string& p : measure::runnable_processes()) runnable_after.push_back(p);
  const ReferenceSteps& ref = x.ref;
  return {{"command", command},
          {"shape", shape_key},
          {"host", machine.host},
          {"cpu_model", machine.cpu_model},
          {"runtime_fingerprint", train::runtime_fingerprint()},
          {"taken_at", train::utc_iso(start.unix_s)},
          {"taken_unix_s", start.unix_s},
          {"duration_s", train::unix_now() - start.unix_s},
          {"load_average", {start.load_average, measure::load_average()}},
          {"loadavg", start.loadavg},
          {"loadavg_end", measure::loadavg_text()},
          {"other_runnable_processes", runnable},
          {"other_runnable_processes_end", runnable_after},
          {"background_jobs", x.background},
          {"disturbed", any_disturbed},
          {"previous", s.last ? Json{{"path", s.last->path}, {"taken_at", s.last->taken_at}} : Json()},
          {"gemm_flops_per_s_one_thread", x.gemm.one_thread},
          {"gemm_flops_per_s_all_cores", x.gemm.all_cores},
          {"gemm_bf16_flops_per_s_one_thread", x.gemm.bf16_one_thread},
          {"gemm_bf16_path", kernels::bf16_gemm_description()},
          {"reference_step_bf16_s", ref.bf16.step_s},
          {"reference_step_bf16_loss", ref.bf16.loss},
          {"reference_step_loss", ref.one.loss},
          {"reference_step_bf16_kernels_only_s", x.fit.bf16_kernels_only_s},
          {"reference_step_s", ref.one.step_s},
          {"reference_step_all_cores_s", ref.all_cores.step_s},
          {"thread_scaling_gemm", x.gemm_scaling},
          {"thread_scaling_source", x.fit.step_scaling ? "training step"
                                    : x.idle           ? "gemm"
                                                       : "preset"},
          {"reference_step_distributed_s", ref.two_ranks.step_s},
          {"reference_step_distributed_comm_s", ref.two_ranks.comm_s},
          {"reference_step_distributed_planned_comm_s", x.fit.planned_two_rank_comm_s},
          {"reference_step_distributed_wait_s", x.fit.rank_wait_s},
          {"reference_step_kernels_only_s", x.fit.kernels_only_s},
          {"host_speed_probe_flops_per_s", 0.5 * (ref.probe_before + ref.probe_after)},
          {"host_speed_probe_flops_per_s_before", ref.probe_before},
          {"host_speed_probe_flops_per_s_after", ref.probe_after},
          {"measurements", measurements},
          {"comm", std::move(comm_samples)}};
}

int run_calibrate(const CalibrateOptions& o) {
  Result<model::LlamaConfig> mr = model::resolve_model(o.model);
  if (!mr.ok()) return report_error("calibrate", mr.error());
  const model::LlamaConfig& m = *mr;
  const train::MachineKey machine = train::this_machine();
  const std::string out = o.out.empty() ? train::stored_calibration_path(machine, o.calibration_dir) : o.out;
  const std::string shape_key =
      m.name + " micro-batch " + std::to_string(o.micro_batch) + " seq-len " + std::to_string(o.seq_len);
  std::optional<train::StoredCalibration> at_out;  // the calibration at the output, when --if-missing read it
  if (o.if_missing) {
    std::error_code ec;
    if (std::filesystem::exists(out, ec)) {
      Result<train::StoredCalibration> c = train::read_calibration(out);
      if (!c.ok()) return report_error("calibrate", c.error().with_context("--if-missing: " + out));
      if (c->measured_by_this_build()) {
        std::cout << train::calibration_line(*c, train::unix_now()) << " (kept: --if-missing)\n";
        return 0;
      }
      // It times another build's kernels: this build is measured, the old file kept as `previous`.
      std::cout << "calibration at " << out << " was measured by " << train::other_build_text(*c)
                << ": measuring this one (--if-missing)\n";
      at_out = std::move(*c);
    }
  }
  Session s(o, m);
  s.rows = o.micro_batch * o.seq_len;
  s.cores = usable_cores();
  s.last = previous_calibration(o, out, shape_key, std::move(at_out));
  const HostAtStart start{train::unix_now(), measure::load_average(), measure::loadavg_text(),
                          measure::runnable_processes()};
  Measured x;
  x.background = train::background_jobs(o.background_jobs);
  s.probe = measure::host_load_probe(s.cores);

  x.gemm = measure_gemms(s);
  // The all-core rate is the threads' scaling only when nothing else ran: with other jobs running (or
  // every take disturbed) the preset's value, measured on an idle host, is kept.
  const topology::Cluster preset = *topology::cluster_preset("local-cpu");
  x.idle = x.background < 0.5 && !x.gemm.all_cores_disturbed;
  x.gemm_scaling =
      !x.idle ? preset.accelerator.thread_scaling
      : s.cores > 1
          ? std::clamp((x.gemm.all_cores / x.gemm.one_thread - 1.0) / static_cast<double>(s.cores - 1), 0.05, 1.0)
          : 1.0;
  x.attention = measure_attention(s, x.gemm);
  x.stream = measure_stream(s);
  x.overhead_us = measure_op_overhead(s, x.gemm.one_thread);
  Result<CommCalibration> comm = measure_comm(s);
  if (!comm.ok()) return report_error("calibrate", comm.error().with_context("timing the local communicator"));
  x.comm = std::move(*comm);
  topology::Cluster c =
      kernel_cluster(preset, s.cores, x.gemm, x.attention, x.stream, x.overhead_us, x.gemm_scaling, x.comm.fit);

  Result<ReferenceSteps> ref = measure_reference_steps(s);
  if (!ref.ok()) return report_error("calibrate", ref.error());
  x.ref = *ref;
  s.table.add(
      {"host speed probe (all cores)", "512^3 x " + std::to_string(s.cores),
       "before " + format_fixed(x.ref.probe_before / 1e9, 1) + ", after " + format_fixed(x.ref.probe_after / 1e9, 1),
       format_fixed(0.5 * (x.ref.probe_before + x.ref.probe_after) / 1e9, 1) + " GFLOP/s per core"});
  Result<RuntimeFit> fit = fit_runtime(s, x.ref, x.gemm_scaling, x.idle, c);
  if (!fit.ok()) return report_error("calibrate", fit.error());
  x.fit = *fit;

  Json comm_samples = report(s, c, x);
  Json j = topology::cluster_to_json(c);
  j["calibration"] = calibration_record(s, machine, shape_key, start, x, std::move(comm_samples));
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(out).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (Status w = write_file(out, json_text(j, 2) + "\n"); !w.ok()) {
    return report_error("calibrate", make_error(o.out.empty() ? "--calibration-dir: " : "--out: ", w.error().message(),
                                                "; check the directory"));
  }
  if (!x.idle && !x.gemm.all_cores_disturbed) {
    std::cout << "warning: " << format_fixed(x.background, 1)
              << " other jobs were running: the reference training steps ran beside them, so the runtime "
                 "efficiencies are low; calibrate on a quiet host\n";
  }
  std::cout << "wrote " << out
            << (o.out.empty() ? " (this machine's calibration: herd train uses it unless --projection.cluster_file "
                                "names another"
                              : " (use it with herd train --projection.cluster_file=" + out +
                                    " or herd estimate --cluster " + out)
            << "); load average " << format_fixed(start.load_average, 2) << ", " << start.runnable.size()
            << " other runnable processes at the start\n";
  return 0;
}

}  // namespace

Subcommand add_calibrate_command(CLI::App& root) {
  auto o = std::make_shared<CalibrateOptions>();
  auto device = std::make_shared<std::string>("cpu");
  auto gpu_cluster = std::make_shared<std::string>("h200");
  CLI::App* app = root.add_subcommand(
      "calibrate", "Measure this machine's herd kernels and local communicator; write the local-cpu cluster JSON");
  app->add_option("--model", o->model, "Model whose layer shapes are timed (a preset or config.json)")
      ->capture_default_str();
  app->add_option("--micro-batch", o->micro_batch, "Sequences per micro-batch of the timed shapes")
      ->check(positive_integer())
      ->capture_default_str();
  app->add_option("--seq-len", o->seq_len, "Sequence length of the timed shapes")
      ->check(positive_integer())
      ->capture_default_str();
  app->add_option("--repeats", o->repeats, "Timed repeats per kernel take (the median counts)")
      ->check(positive_integer())
      ->capture_default_str();
  app->add_option("--takes", o->takes,
                  "Takes of every measurement, the best kept; a take beside other jobs or implausible is redone "
                  "(at most 2 more)")
      ->check(positive_integer())
      ->capture_default_str();
  app->add_option("--out", o->out,
                  "Where to write the cluster JSON (then: herd train --projection.cluster_file=FILE, herd "
                  "estimate/plan --cluster FILE); default: this machine's stored calibration, which herd train uses");
  app->add_option("--calibration-dir", o->calibration_dir,
                  "The store of per-machine calibrations (default: calibration/ beside the herd executable)");
  app->add_option("--previous", o->previous,
                  "The calibration to compare rates with (a take far from it is redone); default: the one at the "
                  "output path, when of the same model and shapes; none: no comparison");
  app->add_flag("--if-missing", o->if_missing,
                "When the output already holds a calibration made by this build of herd, print its age and load "
                "and measure nothing (one made by another build is measured again)");
  app->add_option("--background-jobs", o->background_jobs,
                  "Other jobs sharing the cores: -1 measures them from /proc; 0 declares an idle host (the "
                  "all-core GEMM rate then sets thread_scaling)")
      ->check(number_in(-1.0, 1e6))
      ->capture_default_str();
  app->add_option("--device", *device,
                  "cpu: this host (the local-cpu cluster); cuda: herd's GPU kernels on GPU 0, written as --cluster's "
                  "preset with the efficiencies they reached (needs --out; docs/gpu.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  CLI::Option* cluster_opt =
      app->add_option("--cluster", *gpu_cluster,
                      "With --device cuda: the GPU preset (or cluster file) whose peaks and network are kept")
          ->capture_default_str();
  return {app, [o, device, gpu_cluster, cluster_opt] {
            if (*device == "cpu") {
              if (cluster_opt->count() > 0) {
                return report_error("calibrate", Error("--cluster: only with --device cuda (a CPU calibration "
                                                       "writes the local-cpu cluster of this host)"));
              }
              return run_calibrate(*o);
            }
            calibration::DeviceCalibrateOptions d;
            d.model = o->model;
            d.micro_batch = o->micro_batch;
            d.seq_len = o->seq_len;
            d.cluster = *gpu_cluster;
            d.out = o->out;
            d.repeats = o->repeats;
            return calibration::run_calibrate_device(d);
          }};
}

}  // namespace herd::cli
