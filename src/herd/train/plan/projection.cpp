// The planner's prediction for a `herd train` run on local-cpu, and its comparison with the run.
#include "herd/train/plan/projection.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "herd/core/file_write.h"
#include "herd/core/format.h"
#include "herd/core/json_text.h"
#include "herd/core/log.h"
#include "herd/core/stats.h"
#include "herd/kernels/device.h"
#include "herd/train/plan/calibration_store.h"
#include "herd/train/plan/host_speed.h"

namespace herd::train {

Result<topology::Cluster> local_cpu_cluster(const std::string& cluster_file) {
  if (!cluster_file.empty()) {
    Result<topology::Cluster> c = topology::load_cluster(cluster_file);
    if (!c.ok()) return c.error().with_context("projection.cluster_file");
    return c;
  }
  return topology::cluster_preset("local-cpu");
}

namespace {

// The preset of the GPU this process sees, by its name.
std::string gpu_preset(const TrainConfig& cfg) {
  const Result<kernels::Device> d = train_device(cfg);
  const kernels::DeviceBackend* b = d.ok() ? kernels::device_backend(*d) : nullptr;
  const std::string name = b != nullptr && b->device_count(nullptr) > 0 ? b->describe(0) : "";
  return name.find("H200") != std::string::npos ? "h200" : "dgx-h100";
}

bool on_gpu(const TrainConfig& cfg) {
  const Result<kernels::Device> d = train_device(cfg);
  return d.ok() && *d != kernels::Device::kCpu;
}

}  // namespace

Result<topology::Cluster> run_cluster(const TrainConfig& cfg) {
  if (cfg.projection.cluster_file.empty() && on_gpu(cfg)) return topology::cluster_preset(gpu_preset(cfg));
  return local_cpu_cluster(cfg.projection.cluster_file);
}

double device_peak_flops(const TrainConfig& cfg) {
  Result<topology::Cluster> c = run_cluster(cfg);
  if (!c.ok()) c = topology::cluster_preset(gpu_preset(cfg));
  const topology::Accelerator& a = c->accelerator;
  const bool bf16 = cfg.train.precision == Precision::kBF16;
  return (bf16 && a.peak_tflops_bf16 > 0 ? a.peak_tflops_bf16 : a.peak_tflops_fp32) * 1e12;
}

double background_jobs(double fixed) { return fixed >= 0 ? fixed : measure::sample_background_jobs(); }

double peak_flops_per_core(const TrainConfig& cfg) {
  const bool bf16 = cfg.train.precision == Precision::kBF16;
  if (cfg.train.peak_gflops_per_core > 0) return cfg.train.peak_gflops_per_core * 1e9 * (bf16 ? 2.0 : 1.0);
  Result<topology::Cluster> c = local_cpu_cluster(cfg.projection.cluster_file);
  if (!c.ok()) c = topology::cluster_preset("local-cpu");
  const topology::Accelerator& a = c->accelerator;
  const double tflops = bf16 && a.peak_tflops_bf16 > 0 ? a.peak_tflops_bf16 : a.peak_tflops_fp32;
  return tflops * 1e12;
}

topology::Cluster at_host_speed(topology::Cluster c, double speed) {
  if (speed == 1.0 || speed <= 0) return c;
  topology::Accelerator& a = c.accelerator;
  a.peak_tflops_fp32 *= speed;
  a.peak_tflops_bf16 *= speed;
  a.peak_tflops_fp8 *= speed;
  a.memory_bw_gb_per_s *= speed;
  a.kernel_overhead_us /= speed;
  for (topology::Tier& t : c.tiers) {
    t.bw_gb_per_s *= speed;
    t.latency_us /= speed;
  }
  return c;
}

Result<Projection> project(const model::LlamaConfig& m, const ResolvedLayout& r, int threads,
                           const topology::Cluster& cluster, double host_speed) {
  topology::Cluster host = at_host_speed(cluster, host_speed);
  if (threads > 0 && host.accelerator.host_cores > 0) host.accelerator.threads_per_rank = threads;
  const planner::TrainingSpec& spec = r.spec;
  planner::Layout l = r.layout;
  // One rank: plain fp32 AdamW on the whole model. More: every rank runs herd's FSDP flat units,
  // which keep the gathered weights from forward to backward unless resharded.
  l.zero = l.gpus() > 1 ? 3 : 0;
  // herd's pipeline runtime places layers with light ends (parallel/pp/executor.h).
  l.layer_split = planner::LayerSplit::kLightEnds;
  Projection p;
  p.layout = r;
  p.threads = threads;
  p.cluster = cluster.name;
  p.model = m;
  p.host = cluster;
  p.background_jobs = cluster.accelerator.background_jobs;
  p.host_speed = host_speed;
  HERD_ASSIGN_OR_RETURN(p.estimate, planner::estimate(m, host, spec, l, l.gpus()));
  // The same plan without what was measured at run time: at the calibrated speed, and on an idle host.
  topology::Cluster calibrated_speed = cluster;
  calibrated_speed.accelerator.threads_per_rank = host.accelerator.threads_per_rank;
  p.step_s_calibrated_speed = p.estimate.time.step_s;
  if (host_speed != 1.0) {
    HERD_ASSIGN_OR_RETURN(const planner::Estimate e, planner::estimate(m, calibrated_speed, spec, l, l.gpus()));
    p.step_s_calibrated_speed = e.time.step_s;
  }
  p.step_s_idle = p.step_s_calibrated_speed;
  if (host.accelerator.background_jobs > 0) {
    topology::Cluster idle = calibrated_speed;
    idle.accelerator.background_jobs = 0;
    HERD_ASSIGN_OR_RETURN(const planner::Estimate e, planner::estimate(m, idle, spec, l, l.gpus()));
    p.step_s_idle = e.time.step_s;
  }
  const planner::MemoryBreakdown& mb = p.estimate.memory;
  p.state_bytes =
      mb.part("parameters") + mb.part("gradients") + mb.part("optimizer_state") + mb.part("embedding_output");
  // The runtime's arena holds the saved activations, the backward's temporaries and the collective
  // buffers; it does not fragment, so the planner's caching-allocator allowance is left out.
  p.saved_activation_bytes = mb.part("activations");
  p.activation_bytes =
      mb.part("activations") + mb.part("transient") + mb.part("comm_buffers") + mb.part("fsdp_gathered");
  return p;
}

double median_step_seconds(const std::vector<StepRecord>& history) {
  std::vector<double> dt;
  std::int64_t prev = -1;
  for (const StepRecord& r : history) {
    // The first record has no previous token count; later ones give the step's tokens exactly.
    if (prev >= 0 && r.tokens_per_s > 0) dt.push_back(static_cast<double>(r.tokens - prev) / r.tokens_per_s);
    prev = r.tokens;
  }
  if (dt.empty()) {
    if (history.empty() || history[0].tokens_per_s <= 0) return 0;
    return static_cast<double>(history[0].tokens) / history[0].tokens_per_s;  // one step: itself
  }
  return median(std::move(dt));
}

MeasuredRun measured_run(const std::vector<StepRecord>& history, const parallel::RankMemoryUse& memory) {
  MeasuredRun r;
  r.step_s = median_step_seconds(history);
  r.steps = static_cast<std::int64_t>(history.size());
  r.memory = memory;
  // The same steps as the step median: the first left out unless it is the only one.
  std::vector<double> wait;
  for (std::size_t i = history.size() > 1 ? 1 : 0; i < history.size(); ++i) {
    if (history[i].comm_wait_s >= 0) wait.push_back(history[i].comm_wait_s);
  }
  if (!wait.empty()) r.comm_s = median(std::move(wait));
  // The parts: each a median over the steps that measured it; the checkpoints a mean per step.
  std::array<std::vector<double>, measure::kGroupKinds> by_kind;
  std::vector<double> optimizer, compute;
  double checkpoints = 0;
  std::size_t counted = 0;
  for (std::size_t i = history.size() > 1 ? 1 : 0; i < history.size(); ++i) {
    const StepRecord& h = history[i];
    ++counted;
    const double ck = std::max(0.0, h.checkpoint_s);
    checkpoints += ck;
    if (h.optimizer_s >= 0) optimizer.push_back(h.optimizer_s);
    if (!h.comm_by_kind_s) continue;
    double comm = 0;
    for (int k = 0; k < measure::kGroupKinds; ++k) {
      by_kind[static_cast<std::size_t>(k)].push_back((*h.comm_by_kind_s)[static_cast<std::size_t>(k)]);
      comm += (*h.comm_by_kind_s)[static_cast<std::size_t>(k)];
    }
    if (h.step_s > 0) compute.push_back(std::max(0.0, h.step_s - comm - std::max(0.0, h.optimizer_s) - ck));
  }
  for (int k = 0; k < measure::kGroupKinds; ++k) {
    if (!by_kind[static_cast<std::size_t>(k)].empty()) {
      r.comm_by_kind_s[static_cast<std::size_t>(k)] = median(by_kind[static_cast<std::size_t>(k)]);
    }
  }
  if (!optimizer.empty()) r.optimizer_s = median(std::move(optimizer));
  if (!compute.empty()) r.compute_s = median(std::move(compute));
  if (counted > 0) r.checkpoint_s = checkpoints / static_cast<double>(counted);
  return r;
}

std::vector<StepPart> step_parts(const Projection& p, const MeasuredRun& run) {
  const planner::TimeBreakdown& t = p.estimate.time;
  const planner::Layout& l = p.layout.layout;
  auto kind = [&](measure::GroupKind k) { return run.comm_by_kind_s[static_cast<std::size_t>(k)]; };
  std::vector<StepPart> parts = {{"compute", t.compute_s + t.straggler_s, run.compute_s}};
  if (l.tp > 1) parts.push_back({"tp", t.tp_s, kind(measure::GroupKind::kTp)});
  if (l.cp > 1) parts.push_back({"cp", t.cp_s, kind(measure::GroupKind::kCp)});
  if (l.dp * l.cp > 1) parts.push_back({"dp", t.dp_s, kind(measure::GroupKind::kDp)});
  if (l.pp > 1) parts.push_back({"pp + bubble", t.pp_s + t.bubble_s, kind(measure::GroupKind::kPp)});
  parts.push_back({"optimizer", t.optimizer_s, run.optimizer_s});
  if (l.gpus() > 1) parts.push_back({"control", -1, kind(measure::GroupKind::kOther)});
  if (run.checkpoint_s > 0) parts.push_back({"checkpoint", -1, run.checkpoint_s});
  return parts;
}

Json parts_json(const std::vector<StepPart>& parts) {
  Json out = Json::array();
  for (const StepPart& x : parts) {
    out.push_back({{"part", x.name},
                   {"planned_s", x.planned_s < 0 ? Json() : Json(x.planned_s)},
                   {"measured_s", x.measured_s < 0 ? Json() : Json(x.measured_s)}});
  }
  return out;
}

std::string parts_line(const std::vector<StepPart>& parts) {
  std::string out = "by part (rank 0, per step):";
  bool first = true;
  for (const StepPart& x : parts) {
    if (x.measured_s < 0 && x.planned_s < 0) continue;
    out += first ? " " : " | ";
    first = false;
    out += x.name + " ";
    if (x.planned_s < 0) {
      out += format_seconds(x.measured_s) + " (not planned)";
    } else if (x.measured_s < 0) {
      out += format_seconds(x.planned_s) + " planned (not measured)";
    } else {
      const double e = x.measured_s > 0 ? 100.0 * (x.planned_s - x.measured_s) / x.measured_s : 0.0;
      out += format_seconds(x.planned_s) + " vs " + format_seconds(x.measured_s) +
             (x.measured_s > 0 ? " (" + std::string(e >= 0 ? "+" : "") + format_fixed(e, 1) + "%)" : "");
    }
  }
  return out;
}

namespace {

std::string mib(double bytes) { return format_fixed(bytes / (1024.0 * 1024.0), 1) + " MiB"; }
std::string secs(double s) { return format_fixed(s, s < 0.1 ? 4 : 3); }
std::string pct(double planned, double measured) {
  if (measured <= 0) return "n/a";
  const double e = 100.0 * (planned - measured) / measured;
  std::string out = e >= 0 ? "+" : "";
  out += format_fixed(e, 1);
  out += "%";
  return out;
}

}  // namespace

// ", host at 0.93x its calibrated speed" when the host was probed.
std::string speed_note(const Projection& p) {
  if (p.probe_calibrated_flops <= 0) return "";
  return ", host at " + format_fixed(p.host_speed, 2) + "x its calibrated speed";
}

std::string planned_line(const Projection& p) {
  const planner::TimeBreakdown& t = p.estimate.time;
  const bool bf16 = p.layout.spec.precision == planner::Precision::kBF16;
  return "planned (" + p.cluster + ", " + std::to_string(p.layout.layout.gpus()) + " rank" +
         (p.layout.layout.gpus() > 1 ? "s" : "") + (bf16 ? ", bf16" : "") + ", " + format_fixed(p.background_jobs, 1) +
         " background jobs" + speed_note(p) + "): step " + secs(t.step_s) + " s (compute " + secs(t.compute_s) +
         ", comm " + secs(t.exposed_comm_s()) + ", bubble " + secs(t.bubble_s) + ", optimizer " + secs(t.optimizer_s) +
         ") | memory/rank " + mib(p.memory_bytes()) + " (state " + mib(p.state_bytes) + ", activations " +
         mib(p.activation_bytes) + ")";
}

std::string planned_vs_measured_line(const Projection& p, const MeasuredRun& run) {
  const parallel::RankMemoryUse& mem = run.memory;
  const double comm = p.estimate.time.exposed_comm_s();
  return "planned vs measured (" + format_fixed(p.background_jobs, 1) + " background jobs over the run" +
         speed_note(p) + "): step " + secs(p.step_s()) + " s vs " + secs(run.step_s) + " s (" +
         pct(p.step_s(), run.step_s) + ")" +
         (run.comm_s < 0 ? std::string()
                         : " | exposed comm " + secs(comm) + " s vs " + secs(run.comm_s) + " s (rank 0 blocked)") +
         " | memory/rank " + mib(p.memory_bytes()) + " vs " + mib(mem.total()) + " (" +
         pct(p.memory_bytes(), mem.total()) + "; state " + mib(p.state_bytes) + " vs " + mib(mem.state_bytes) +
         ", activations " + mib(p.activation_bytes) + " vs " + mib(mem.activation_bytes()) + ": arena " +
         mib(mem.arena_peak_bytes) + " + kernel scratch " + mib(mem.kernel_scratch_bytes) + ")" +
         (mem.saved_activation_bytes < 0
              ? std::string()
              : " | saved activations " + mib(p.saved_activation_bytes) + " vs " + mib(mem.saved_activation_bytes) +
                    " (" + pct(p.saved_activation_bytes, mem.saved_activation_bytes) + ")") +
         (mem.device_peak_bytes < 0 ? std::string()
                                    : " | GPU allocator peak " + mib(mem.device_peak_bytes) + " (" +
                                          pct(p.memory_bytes(), mem.device_peak_bytes) + " against one rank's plan)");
}

Json projection_json(const Projection& p, const MeasuredRun& run) {
  const planner::Layout& l = p.layout.layout;
  const parallel::RankMemoryUse& mem = run.memory;
  const planner::TimeBreakdown& t = p.estimate.time;
  return {{"cluster", p.cluster},
          {"layout",
           {{"tp", l.tp},
            {"cp", l.cp},
            {"pp", l.pp},
            {"dp", l.dp},
            {"v", l.v},
            {"microbatches", p.layout.microbatches},
            {"n", p.estimate.n},
            {"micro_batch", l.microbatch},
            {"seq_len", p.layout.spec.seq_len},
            {"recompute", model::recompute_name(l.recompute)},
            {"sequence_parallel", l.sequence_parallel && l.tp > 1},
            {"ranks", l.gpus()},
            {"line", l.to_string()}}},
          {"background_jobs", p.background_jobs},
          {"host_speed",
           {{"probed", p.probe_calibrated_flops > 0},
            {"ratio", p.host_speed},
            {"at_start", p.host_speed_at_start},
            {"at_end", p.host_speed_at_end},
            {"calibrated_probe_flops_per_s", p.probe_calibrated_flops}}},
          {"precision", planner::precision_name(p.layout.spec.precision)},
          {"planned",
           {{"step_s", t.step_s},
            {"step_s_idle", p.step_s_idle},
            {"step_s_calibrated_speed", p.step_s_calibrated_speed},
            {"compute_s", t.compute_s},
            {"comm_s", t.exposed_comm_s()},
            {"tp_s", t.tp_s},
            {"cp_s", t.cp_s},
            {"pp_s", t.pp_s},
            {"dp_s", t.dp_s},
            {"bubble_s", t.bubble_s},
            {"optimizer_s", t.optimizer_s},
            {"pipeline_rank_busy_s", p.estimate.pipeline_rank_busy_s},
            {"memory_bytes", p.memory_bytes()},
            {"state_bytes", p.state_bytes},
            {"activation_bytes", p.activation_bytes},
            {"saved_activation_bytes", p.saved_activation_bytes}}},
          {"measured",
           {{"step_s", run.step_s},
            {"comm_s", run.comm_s},
            {"job_cores", run.job_cores},
            {"steps", run.steps},
            {"memory_bytes", mem.total()},
            {"state_bytes", mem.state_bytes},
            {"activation_bytes", mem.activation_bytes()},
            {"arena_peak_bytes", mem.arena_peak_bytes},
            {"kernel_scratch_bytes", mem.kernel_scratch_bytes},
            {"saved_activation_bytes", mem.saved_activation_bytes},
            {"device_peak_bytes", mem.device_peak_bytes}}},
          {"parts", parts_json(step_parts(p, run))}};
}

namespace {

// The calibration's probe rate when this run may probe the host: 0 otherwise (the preset, a calibration
// from before the probe, projection.speed_probe off, ranks that are not threads of this process).
double probe_reference(const TrainConfig& cfg, const topology::Cluster& c, bool probe_host) {
  if (!probe_host || !cfg.projection.speed_probe || cfg.projection.cluster_file.empty() ||
      c.accelerator.host_cores < 1) {
    return 0;
  }
  Result<StoredCalibration> stored = read_calibration(cfg.projection.cluster_file);
  return stored.ok() ? calibrated_probe_flops(stored->record) : 0.0;
}

}  // namespace

Result<Projection> plan_run(const TrainConfig& cfg, const model::LlamaConfig& m, bool print, bool probe_host) {
  // Quiet trainers (tests, ranks other than 0) neither print nor write: no sampling thread for them.
  if (!print) return make_error("no projection: this trainer does not report");
  Result<Projection> p = [&]() -> Result<Projection> {
    HERD_ASSIGN_OR_RETURN(const ResolvedLayout l, resolve_layout(cfg));
    HERD_ASSIGN_OR_RETURN(topology::Cluster c, run_cluster(cfg));
    measure::HostCpuTimes at_start;
    if (c.accelerator.host_cores > 0) {
      c.accelerator.background_jobs = background_jobs(cfg.projection.background_jobs);
      if (cfg.projection.background_jobs < 0) at_start = measure::host_cpu_times();
    }
    const double reference = probe_reference(cfg, c, probe_host);
    const double speed =
        reference > 0 ? host_speed_ratio(probe_host_flops(static_cast<int>(c.accelerator.host_cores)), reference) : 1.0;
    HERD_ASSIGN_OR_RETURN(Projection p, project(m, l, static_cast<int>(cfg.train.threads), c, speed));
    p.cpu_at_start = at_start;
    p.probe_calibrated_flops = reference;
    p.host_speed_at_start = p.host_speed_at_end = speed;
    // Said on the line itself: a plan from the committed preset was not measured on this machine.
    if (cfg.projection.cluster_file.empty()) {
      p.cluster = on_gpu(cfg) ? gpu_preset(cfg) + " preset (herd calibrate --device cuda measures this GPU)"
                              : "local-cpu preset, uncalibrated";
    }
    return p;
  }();
  if (print) log_info(p.ok() ? planned_line(*p) : "planned: no projection (" + p.error().message() + ")");
  return p;
}

void report_run(const Result<Projection>& plan, const TrainConfig& cfg, const std::vector<StepRecord>& history,
                const parallel::RankMemoryUse& mem, bool print) {
  if (!plan.ok() || history.empty()) return;
  MeasuredRun measured = measured_run(history, mem);
  Projection at_run = *plan;
  const measure::HostCpuTimes at_end_cpu = measure::host_cpu_times();
  const double background =
      measure::background_jobs_between(plan->cpu_at_start, at_end_cpu, plan->host.accelerator.host_cores);
  // /proc counts CPU time in clock ticks (10 ms): a run shorter than a fifth of a second is not resolved.
  if (plan->cpu_at_start.ok && at_end_cpu.ok && at_end_cpu.wall_s > plan->cpu_at_start.wall_s + 0.2) {
    measured.job_cores =
        measure::job_seconds_between(plan->cpu_at_start, at_end_cpu) / (at_end_cpu.wall_s - plan->cpu_at_start.wall_s);
  }
  // The host's speed over the run: the mean of the probes before the first step and after the last.
  const double at_end = plan->probe_calibrated_flops > 0
                            ? host_speed_ratio(probe_host_flops(static_cast<int>(plan->host.accelerator.host_cores)),
                                               plan->probe_calibrated_flops)
                            : 1.0;
  if (background >= 0 || plan->probe_calibrated_flops > 0) {
    topology::Cluster c = plan->host;
    if (background >= 0) c.accelerator.background_jobs = background;
    Result<Projection> redone =
        project(plan->model, plan->layout, plan->threads, c, 0.5 * (plan->host_speed_at_start + at_end));
    if (redone.ok()) {
      at_run = *redone;
      at_run.cluster = plan->cluster;
      at_run.probe_calibrated_flops = plan->probe_calibrated_flops;
      at_run.host_speed_at_start = plan->host_speed_at_start;
      at_run.host_speed_at_end = at_end;
    }
  }
  if (print) {
    log_info(planned_vs_measured_line(at_run, measured));
    log_info(parts_line(step_parts(at_run, measured)));
  }
  if (print && !cfg.train.projection_file.empty()) {
    Json j = projection_json(at_run, measured);
    j["planned"]["step_s_at_start"] = plan->step_s();
    j["background_jobs_at_start"] = plan->background_jobs;
    // A warning, not an error: the training it reports on is done and saved.
    if (Status s = write_file(cfg.train.projection_file, json_text(j, 2) + "\n"); !s.ok()) {
      log_warning("train.projection_file: ", s.error().message());
    }
  }
}

}  // namespace herd::train
