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
// (train/plan/calibration_store.h), which `herd train` then uses by default.
// Just before and after the reference steps, the host speed probe (train/plan/host_speed.h): their mean is
// recorded, and `herd train` plans at the ratio of its own probe to it.
// The committed preset's numbers came from this command; docs/projection.md. The timers, the communicator's
// timing and fit and the host readers are measure/'s; the kernel and communicator stage is
// train/plan/calibrate_kernels.{h,cpp}, the reference steps and what they make of the kernel rates
// train/plan/calibrate_steps.{h,cpp}; this file runs both and writes the cluster.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>

#include "herd/cli/app.h"
#include "herd/cli/calibrate_device.h"
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
#include "herd/train/job/job.h"
#include "herd/train/plan/calibrate_kernels.h"
#include "herd/train/plan/calibrate_steps.h"
#include "herd/train/plan/calibration_store.h"
#include "herd/train/plan/host_speed.h"
#include "herd/train/plan/projection.h"
#include "herd/train/step/trainer.h"

namespace herd::cli {

namespace {

using train::calibration::AttentionRates;
using train::calibration::CalibrateOptions;
using train::calibration::CommCalibration;
using train::calibration::far_from_last;
using train::calibration::GemmRates;
using train::calibration::kLowestScaling;
using train::calibration::ReferenceSteps;
using train::calibration::RuntimeFit;
using train::calibration::Session;

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

// Everything one calibration measured and derived, for its report and its record.
struct Measured {
  GemmRates gemm;
  double gemm_scaling = 0;  // the all-core GEMM's thread scaling (the preset's when the host was not idle)
  double background = 0;    // other jobs sharing the cores (measured or declared)
  bool idle = false;        // no other jobs and the all-core GEMM undisturbed
  AttentionRates attention;
  double stream = 0, optimizer_bw = 0, overhead_us = 0;
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
  s.table_rows.push_back({"training step (1 rank, 1 thread)", shape, format_fixed(1e3 * ref.one.step_s, 1) + " ms",
                          "kernels alone " + format_fixed(1e3 * fit.kernels_only_s, 1) + " ms: runtime " +
                              format_fixed(100 * fit.efficiency, 1) + "%"});
  if (ref.all_cores.step_s > 0) {
    s.table_rows.push_back(
        {"training step (1 rank, " + std::to_string(s.cores) + " threads)", shape,
         format_fixed(1e3 * ref.all_cores.step_s, 1) + " ms",
         "thread scaling " +
             format_fixed((ref.one.step_s / ref.all_cores.step_s - 1.0) / static_cast<double>(s.cores - 1), 2) +
             " (GEMM " + format_fixed(x.gemm_scaling, 2) + ")"});
  }
  s.table_rows.push_back({"training step (1 rank, 1 thread), bf16", shape,
                          format_fixed(1e3 * ref.bf16.step_s, 1) + " ms",
                          "kernels alone " + format_fixed(1e3 * fit.bf16_kernels_only_s, 1) + " ms: runtime " +
                              format_fixed(100 * fit.bf16_efficiency, 1) + "%"});
  s.table_rows.push_back({"same per rank, 2 ranks (DP)", shape, format_fixed(1e3 * ref.two_ranks.step_s, 1) + " ms",
                          "comm " + format_fixed(1e3 * ref.two_ranks.comm_s, 1) + " ms: multi-rank " +
                              format_fixed(100 * a.multi_rank_efficiency, 1) + "%"});
  s.table_rows.push_back({"  of which waiting for the other rank", shape,
                          format_fixed(1e3 * fit.rank_wait_s, 1) + " ms",
                          "collectives " + format_fixed(1e3 * fit.planned_two_rank_comm_s, 1) +
                              " ms: speed_variation " + format_fixed(100 * a.speed_variation, 1) + "%"});
  Json raw = Json::array();
  for (const measure::CommSample& cs : x.comm.samples) {
    topology::Cluster storage;
    const topology::Cluster& sh = topology::host_share(c, cs.ranks, &storage);
    Result<topology::GroupLink> link = topology::link_for_group(sh, 1, cs.ranks);
    const double pred = link.ok() ? cs.steps * link->latency_s + cs.volume / link->bw_bytes_per_s : 0;
    s.table_rows.push_back({cs.op + " x" + std::to_string(cs.ranks), format_bytes(cs.bytes),
                            format_fixed(1e6 * cs.seconds, 1) + " us", "model " + format_fixed(1e6 * pred, 1) + " us"});
    raw.push_back(
        {{"op", cs.op}, {"ranks", cs.ranks}, {"bytes", cs.bytes}, {"seconds", cs.seconds}, {"model_s", pred}});
  }
  Table table({"what", "shape", "median", "rate"});
  for (const std::vector<std::string>& row : s.table_rows) table.add(row);
  table.print(std::cout);
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
// and the rates behind the cluster (train/plan/calibration_store.h reads it back).
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
  x.optimizer_bw = measure_optimizer(s);
  x.overhead_us = measure_op_overhead(s, x.gemm.one_thread);
  Result<CommCalibration> comm = measure_comm(s);
  if (!comm.ok()) return report_error("calibrate", comm.error().with_context("timing the local communicator"));
  x.comm = std::move(*comm);
  topology::Cluster c = kernel_cluster(preset, s.cores, x.gemm, x.attention, x.stream, x.optimizer_bw, x.overhead_us,
                                       x.gemm_scaling, x.comm.fit);

  Result<ReferenceSteps> ref = measure_reference_steps(s);
  if (!ref.ok()) return report_error("calibrate", ref.error());
  x.ref = *ref;
  s.table_rows.push_back(
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
