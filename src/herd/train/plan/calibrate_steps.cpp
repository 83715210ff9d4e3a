#include "herd/train/plan/calibrate_steps.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "herd/core/format.h"
#include "herd/kernels/gemm.h"
#include "herd/measure/steady.h"
#include "herd/train/job/job.h"
#include "herd/train/plan/host_speed.h"
#include "herd/train/plan/projection.h"
#include "herd/train/step/trainer.h"

namespace herd::train::calibration {

namespace {

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

// `steps` + 1 training steps of `m` on random documents (the first is warm-up), `threads` kernel threads
// per rank, `micro_batch` sequences per rank, through the trainer of `herd train`: ranks = 1 is a one-rank
// job; 2 is DP = 2 on the local communicator, two thread ranks each doing the single rank's work.
Result<ReferenceStep> reference_step(const model::LlamaConfig& m, std::int64_t micro_batch, std::int64_t seq_len,
                                     int steps, int ranks, Precision precision = Precision::kFP32, int threads = 1) {
  const auto docs = random_documents(m.vocab, 4 * (steps + 1) * ranks * micro_batch * seq_len);
  TrainConfig cfg;
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
  JobResult<float> r;
  r.quiet = true;
  HERD_RETURN_IF_ERROR(run_local_job<float>(cfg, m, {docs, nullptr}, &r, 0, false));
  const MeasuredRun run = measured_run(r.history, {});
  return ReferenceStep{run.step_s, std::max(0.0, run.comm_s), r.history.empty() ? 0.0 : r.history.back().loss};
}

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

}  // namespace

Result<ReferenceSteps> measure_reference_steps(Session& s) {
  Status failed = Status::Ok();
  // Each take is a short training run on the wall clock, redone when other jobs ran beside it.
  auto measure_step = [&](const std::string& what, int ranks, Precision precision, int threads,
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
  // way and plans at the ratio (train/plan/host_speed.h).
  r.probe_before = probe_host_flops(s.cores);
  r.one = measure_step("training step, 1 rank", 1, Precision::kFP32, 1, [&](double secs) {
    return far_from_last("reference step", secs, s.last_step("reference_step_s"), s.last_taken_at());
  });
  // The same one-rank step on every core: its speed-up over the one-thread step is the thread scaling of
  // a training step, which a one-rank plan on several threads needs. Taken from the all-core GEMM alone it
  // moved 0.72 -> 0.93 between two calibrations minutes apart while the two-thread steps did not
  // (bench/projection/measurements.md): one wall-clock GEMM burst is a poor anchor for a whole step.
  if (failed.ok() && s.cores > 1) {
    r.all_cores = measure_step(
        "training step, 1 rank, all cores", 1, Precision::kFP32, s.cores,
        [&](double secs) -> std::string {
          const double sc = (r.one.step_s / secs - 1.0) / static_cast<double>(s.cores - 1);
          if (sc >= kLowestScaling) return "";
          return "step thread scaling " + format_fixed(sc, 2) + " far below 1";
        },
        &r.all_cores_disturbed);
  }
  if (failed.ok()) {
    r.two_ranks =
        measure_step("training step, 2 ranks (DP), communication out", 2, Precision::kFP32, 1, [&](double secs) {
          const double eff = r.one.step_s / secs;
          return eff >= kLowestScaling ? std::string()
                                       : "multi-rank efficiency " + format_fixed(eff, 2) + " far below 1";
        });
  }
  // The bf16 runtime around its kernels, the same way: a single-rank bf16 step.
  if (failed.ok()) {
    r.bf16 = measure_step("training step, 1 rank, bf16", 1, Precision::kBF16, 1, [&](double secs) {
      return far_from_last("bf16 reference step", secs, s.last_step("reference_step_bf16_s"), s.last_taken_at());
    });
  }
  r.probe_after = probe_host_flops(s.cores);
  kernels::set_num_threads(1);
  if (!failed.ok()) return failed.error().with_context("reference training step");
  return r;
}

Result<RuntimeFit> fit_runtime(const Session& s, const ReferenceSteps& ref, double gemm_scaling, bool idle,
                               topology::Cluster& c) {
  RuntimeFit f;
  ResolvedLayout one;
  one.layout.microbatch = s.o.micro_batch;
  one.spec.seq_len = s.o.seq_len;
  one.spec.global_batch = s.o.micro_batch;
  one.spec.precision = planner::Precision::kFP32;
  Result<Projection> kernel_plan = project(s.m, one, /*threads=*/1, c);
  if (!kernel_plan.ok()) return kernel_plan.error().with_context("reference projection");
  f.kernels_only_s = kernel_plan->step_s();
  f.efficiency = std::clamp(f.kernels_only_s / ref.one.step_s, 0.05, 1.0);
  ResolvedLayout one16 = one;
  one16.spec.precision = planner::Precision::kBF16;
  Result<Projection> kernel_plan16 = project(s.m, one16, /*threads=*/1, c);
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
  ResolvedLayout dp2 = one;
  dp2.layout.dp = 2;
  dp2.spec.global_batch = 2 * s.o.micro_batch;
  topology::Cluster no_skew = c;
  no_skew.accelerator.speed_variation = 0;
  Result<Projection> p2 = project(s.m, dp2, /*threads=*/1, no_skew);
  if (!p2.ok()) return p2.error().with_context("two-rank reference projection");
  f.planned_two_rank_comm_s = p2->estimate.time.exposed_comm_s();
  f.rank_wait_s = std::max(0.0, ref.two_ranks.comm_s - f.planned_two_rank_comm_s);
  a.speed_variation = std::clamp(f.rank_wait_s / dist_compute / std::sqrt(2.0 * std::log(2.0)), 0.0, 0.3);
  return f;
}

}  // namespace herd::train::calibration
