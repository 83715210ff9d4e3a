// herd train [CONFIG.json] [--section.field=value ...] [layout flags]: trains a Llama 3 model from the
// token shards `herd data` writes, on one rank or as a TP x CP x PP x FSDP job, through one trainer
// (train/step/trainer.h): ranks as threads of this process, or, under `mpirun -np N herd train ...`,
// `srun herd train ...` or `torchrun --no-python --nproc-per-node N herd train ...`, this process as one
// rank (the launcher's variables: core/launch_env.h). Prints the resolved configuration, the planner's
// projection, a progress line, held-out losses, planned vs measured, and samples at the end.
//
// The layout flags are the planner's (--tp --cp --pp --dp --v --microbatch-size --n --recompute
// --sequence-parallel --reshard-after-forward, plus --seq-len and --global-batch), with the same
// meanings, so the line `herd plan` prints trains as it is. They set the config's fields directly,
// after the file and the --section.field=value overrides. docs/training.md, docs/distributed.md.
//
// --layout auto [--ranks N]: the planner chooses the layout (planner/search.h, fp32, on this machine's
// calibrated cluster): the fastest of N ranks that fits, N being the MPI world size under mpirun (a
// different --ranks is an error) or else --ranks, default the host's cores (ranks as threads). The
// ranking it chose from is printed as `herd plan` prints it, then the job trains the winner.
//
// The plans use this machine's stored calibration (train/plan/calibration_store.h, `herd calibrate`) unless
// projection.cluster_file names a file; its age and the load it saw are printed, and without one the
// plan says plainly that it is uncalibrated (the committed local-cpu preset). docs/projection.md.
//
// --max-restarts K (fault.max_restarts) with ranks as threads: this process becomes the supervisor of
// a child that is this same command line plus the hidden --supervised (train/job/supervisor.h); under
// mpirun the supervisor is `herd launch` (cli/launch.cpp). docs/reliability.md.
#include <filesystem>
#include <iostream>
#include <optional>

#include "herd/cli/app.h"
#include "herd/cli/elastic.h"
#include "herd/cli/planner_options.h"
#include "herd/cli/table.h"
#include "herd/core/cores.h"
#include "herd/core/format.h"
#include "herd/core/json_text.h"
#include "herd/core/launch_env.h"
#include "herd/core/log.h"
#include "herd/data/tokenizer.h"
#include "herd/data/verify.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/library_env.h"
#include "herd/kernels/openmp_wait.h"
#include "herd/model/params.h"
#include "herd/nn/model.h"
#include "herd/planner/search.h"
#include "herd/train/checkpoint/checkpoint_lock.h"
#include "herd/train/checkpoint/hf_checkpoint.h"
#include "herd/train/generate.h"
#include "herd/train/job/job.h"
#include "herd/train/job/preempt.h"
#include "herd/train/job/supervisor.h"
#include "herd/train/plan/calibration_store.h"
#include "herd/train/plan/projection.h"
#include "herd/train/step/trainer.h"

namespace herd::cli {

namespace {

struct TrainOptions {
  std::string config;
  std::int64_t stop_after = 0;
  bool print_config = false;
  bool supervised = false;  // hidden: this process is a supervisor's child (or an MPI rank under herd launch)
  std::optional<std::int64_t> max_restarts;
  std::optional<std::int64_t> tp, cp, pp, dp, seq_len, global_batch;
  LayoutKnobs knobs;
  std::optional<std::string> schedule, backend;
  std::optional<std::string> precision;  // train.precision
  std::optional<std::string> device;     // train.device
  std::optional<std::string> init_from, export_hf;
  std::optional<std::string> layout;  // "auto": the planner chooses
  std::optional<std::int64_t> ranks;  // with --layout auto: the rank count (default: MPI world or cores)
  std::string calibration_dir;        // the store of this machine's calibration (empty: beside herd)
};

// The flags on top of the file and the overrides, set on the fields they name.
Status apply_flags(const TrainOptions& o, train::TrainConfig& cfg) {
  if (o.tp) cfg.parallel.tp = *o.tp;
  if (o.cp) cfg.parallel.cp = *o.cp;
  if (o.pp) cfg.parallel.pp = *o.pp;
  if (o.dp) cfg.parallel.dp = *o.dp;
  if (o.seq_len) cfg.data.seq_len = *o.seq_len;
  if (o.global_batch) cfg.train.global_batch = *o.global_batch;
  if (o.schedule) {
    Result<schedule::ScheduleKind> k = schedule::parse_schedule_kind(*o.schedule);
    if (!k.ok()) return k.error().with_context("parallel.schedule");
    cfg.parallel.schedule = *k;
  }
  if (o.backend) cfg.parallel.backend = *o.backend;
  if (o.precision) {
    HERD_ASSIGN_OR_RETURN(cfg.train.precision, train::parse_run_precision(*o.precision));
  }
  if (o.device) cfg.train.device = *o.device;
  if (o.max_restarts) cfg.fault.max_restarts = *o.max_restarts;
  if (o.init_from) cfg.init.from = *o.init_from;
  if (o.export_hf) cfg.export_.hf = *o.export_hf;
  return apply_layout_knobs(o.knobs, cfg.parallel);
}

void print_resolved(const train::TrainConfig& cfg, const model::LlamaConfig& m) {
  Table t({"key", "value", "meaning"});
  for (const train::FieldInfo& f : train::describe(cfg)) {
    t.add({f.key, f.value.is_string() ? f.value.get<std::string>() : json_text(f.value), f.doc});
  }
  t.print(std::cout);
  std::cout << "\nmodel " << m.name << ": " << format_thousands(model::model_params(m).total()) << " parameters, "
            << m.n_layers << " layers, hidden " << m.hidden << ", heads " << m.n_heads << "/" << m.n_kv_heads
            << ", vocab " << m.vocab << "; BLAS " << kernels::blas_name() << ", " << kernels::num_threads()
            << " threads";
  if (cfg.train.precision == Precision::kBF16)
    std::cout << "; precision bf16, matmuls: " << kernels::bf16_gemm_description();
  std::cout << "\n" << kernels::openmp_wait_description() << "\n" << kernels::blas_core_description() << "\n\n";
  std::cout.flush();
}

// projection.cluster_file empty: this machine's stored calibration when there is one (said with its
// age and load), else the preset, said plainly; a GPU run plans on its GPU's preset (train::run_cluster). A broken
// stored file is a warning: training goes on.
void resolve_calibration(const TrainOptions& o, train::TrainConfig& cfg, bool lead) {
  if (!cfg.projection.cluster_file.empty()) return;
  if (cfg.train.device != "cpu") return;  // the stored calibration is this host's CPU; a GPU plans on its preset
  Result<std::optional<train::StoredCalibration>> stored = train::find_stored_calibration(o.calibration_dir);
  if (!stored.ok()) {
    if (lead) log_warning(stored.error().message(), "; planning with the uncalibrated local-cpu preset");
    return;
  }
  if (!*stored) {
    if (lead) log_info(train::uncalibrated_line(train::this_machine(), o.calibration_dir));
    return;
  }
  cfg.projection.cluster_file = (*stored)->path;
  if (lead) log_info(train::calibration_line(**stored, train::unix_now()));
}

// The ranking of --layout auto, as `herd plan` prints its table.
void print_ranking(const planner::PlanResult& r, std::int64_t ranks, const std::string& cluster) {
  std::cout << "layout auto: " << ranks << " rank" << (ranks > 1 ? "s" : "") << " on " << cluster << ", " << r.families
            << " families of degrees, " << r.layouts_costed << " layouts costed, " << r.layouts_fitting
            << " within memory\n";
  Table t({"#", "tp", "cp", "pp", "dp", "v", "mb", "M", "N", "recompute", "sp", "step s", "memory"});
  int i = 0;
  for (const planner::Estimate& e : r.ranked) {
    const planner::Layout& l = e.layout;
    t.add({std::to_string(++i), std::to_string(l.tp), std::to_string(l.cp), std::to_string(l.pp), std::to_string(l.dp),
           std::to_string(l.v), std::to_string(l.microbatch), std::to_string(e.microbatches), std::to_string(e.n),
           model::recompute_name(l.recompute), l.tp == 1 ? "-" : (l.sequence_parallel ? "yes" : "no"),
           format_fixed(e.time.step_s, 3), format_bytes(e.memory.total_bytes)});
  }
  t.print(std::cout);
  for (const planner::Rejection& x : r.rejected) {
    std::cout << "rejected tp" << x.tp << " cp" << x.cp << " pp" << x.pp << " dp" << x.dp << ": " << x.reason << "\n";
  }
}

// --layout and --ranks on their own, before any data is read. `world`: mpirun's rank count, else 0.
Status check_layout_flags(const TrainOptions& o, std::int64_t world) {
  if (!o.layout) {
    if (o.ranks) return make_error("--ranks ", *o.ranks, ": only with --layout auto (which it sizes); give both");
    return Status::Ok();
  }
  if (*o.layout != "auto") {
    return make_error("--layout: expected auto, got '", *o.layout,
                      "'; leave it out to train the layout the config and the --tp/--cp/--pp/--dp flags give");
  }
  for (const auto& [flag, value] : {std::pair{"--tp", o.tp}, {"--cp", o.cp}, {"--pp", o.pp}, {"--dp", o.dp}}) {
    if (value) {
      return make_error("--layout auto chooses the degrees, but ", flag, " ", *value,
                        " was given; drop it, or drop --layout auto");
    }
  }
  if (world > 0 && o.ranks && *o.ranks != world) {
    return make_error("--ranks ", *o.ranks, ": under mpirun the world size (", world,
                      ") fixes the rank count; drop --ranks or run mpirun -np ", *o.ranks);
  }
  return Status::Ok();
}

// With --layout auto, asks the planner for the fastest layout that fits and sets it on the config.
// `world`: the launcher's rank count under MPI, else 0.
Status choose_layout(const TrainOptions& o, train::TrainConfig& cfg, const model::LlamaConfig& m, std::int64_t world,
                     bool lead) {
  if (!o.layout) return Status::Ok();
  std::int64_t ranks = o.ranks.value_or(0);
  if (world > 0) {
    ranks = world;  // check_layout_flags: a different --ranks was refused
  } else if (!o.ranks) {
    ranks = usable_cores();
  }
  planner::SearchSpace space;
  if (o.knobs.v) space.v = static_cast<int>(*o.knobs.v);
  if (o.knobs.microbatch) space.microbatch = *o.knobs.microbatch;
  if (o.knobs.n) space.n = static_cast<int>(*o.knobs.n);
  if (o.knobs.recompute) space.recompute = cfg.parallel.recompute;
  if (o.knobs.sequence_parallel) space.sequence_parallel = cfg.parallel.sequence_parallel;
  Result<planner::PlanResult> searched = plan_for_run(cfg, m, ranks, space);
  if (!searched.ok()) return searched.error().with_context("--layout auto (" + std::to_string(ranks) + " ranks)");
  const planner::PlanResult& r = *searched;
  const std::string source =
      cfg.projection.cluster_file.empty() ? "the uncalibrated local-cpu preset" : cfg.projection.cluster_file;
  if (r.ranked.empty()) {
    return make_error("--layout auto: none of the ", r.families, " families of ", ranks, " ranks gives a layout of ",
                      m.name, " that fits ", source,
                      r.rejected.empty() ? std::string() : "; e.g. " + r.rejected.back().reason,
                      "; try another --ranks, train.global_batch or data.seq_len");
  }
  if (lead) print_ranking(r, ranks, source);
  int rank = 0;
  for (const planner::Estimate& e : r.ranked) {
    ++rank;
    train::TrainConfig trial = cfg;
    const planner::Layout& l = e.layout;
    static_cast<planner::Layout&>(trial.parallel) = planner::with_searched(trial.parallel, l);
    const Result<train::JobLayout> ok = train::check_layout(trial, m, world > 0 ? 0 : trial.parallel.world());
    if (!ok.ok()) {
      if (lead) std::cout << "layout auto: #" << rank << " cannot train here: " << ok.error().message() << "\n";
      continue;
    }
    cfg = trial;
    if (lead) {
      std::cout << "layout auto: chose #" << rank << ", " << l.to_flags() << " (planned "
                << format_fixed(e.time.step_s, 3) << " s per step)\n\n";
      std::cout.flush();
    }
    return Status::Ok();
  }
  return make_error("--layout auto: the runtime rejects every layout the planner ranked for ", ranks,
                    " ranks; give the layout with --tp/--cp/--pp/--dp");
}

// The final weights, gathered on rank 0, continue the prompt in the plain reference model.
template <typename T>
void print_samples(const train::TrainConfig& cfg, const model::LlamaConfig& m,
                   const std::vector<std::pair<std::string, std::vector<T>>>& weights) {
  if (cfg.data.tokenizer.empty() || cfg.generate.samples == 0 || weights.empty()) return;
  Result<data::Tokenizer> tok = data::Tokenizer::load(cfg.data.tokenizer);
  if (!tok.ok()) {
    log_warning("no samples: ", tok.error().message());
    return;
  }
  Result<std::vector<std::int32_t>> ids = tok->encode(cfg.generate.prompt);
  if (!ids.ok()) return;
  nn::LlamaModel<float> model(m, model::Recompute::kNone, 1, m.max_seq_len);
  for (const auto& [name, w] : weights) {
    const nn::NamedParam& p = model.param(name);
    HERD_CHECK(static_cast<std::int64_t>(w.size()) == p.count(), name);
    std::copy(w.begin(), w.end(), model.params() + p.offset);
  }
  std::vector<std::int32_t> prompt = {tok->bos_id()};
  prompt.insert(prompt.end(), ids->begin(), ids->end());
  std::cout << "\nSamples (prompt \"" << cfg.generate.prompt << "\"; greedy, then temperature 0.8 top-p 0.95)\n";
  for (std::int64_t s = 0; s < cfg.generate.samples; ++s) {
    train::SampleOptions o;
    o.max_tokens = cfg.generate.max_tokens;
    o.temperature = s == 0 ? 0.0 : 0.8;
    o.top_p = 0.95;
    o.seed = static_cast<std::uint64_t>(s);
    o.stop_token = tok->eos_id();
    const std::vector<std::int32_t> out = train::generate(model, prompt, o);
    std::vector<std::int32_t> text(out.begin() + 1, out.end());
    if (!text.empty() && text.back() == tok->eos_id()) text.pop_back();
    Result<std::string> dec = tok->decode(text);
    std::cout << "--- sample " << s + 1 << "\n" << (dec.ok() ? *dec : dec.error().message()) << "\n";
  }
}

// --max-restarts: this process supervises a child running the same command line (train/job/supervisor.h).
// `ranks`: the job's rank count (with fault.elastic, the supervisor re-plans when ranks are lost).
int supervise(const train::TrainConfig& cfg, std::int64_t ranks) {
  train::SupervisorOptions so;
  so.command = command_line();
  if (so.command.empty()) return report_error("train", make_error("no command line to rerun"));
  so.command[0] = train::self_executable();
  so.command.push_back("--supervised");
  so.max_restarts = cfg.fault.max_restarts;
  so.backoff_s = cfg.fault.restart_backoff_s;
  so.job_id = cfg.diagnostics.job_id.empty() ? train::make_job_id() : cfg.diagnostics.job_id;
  so.diagnostics_dir = train::diagnostics_dir(cfg);
  so.metrics_file = cfg.train.metrics_file;
  if (so.metrics_file.empty()) {
    // The time accounting reads the step records: without a metrics file, one goes with the dumps.
    std::error_code ec;
    std::filesystem::create_directories(so.diagnostics_dir, ec);
    so.metrics_file = (std::filesystem::path(so.diagnostics_dir) / ("metrics_" + so.job_id + ".jsonl")).string();
    so.command.push_back("--train.metrics_file=" + so.metrics_file);
  }
  if (cfg.fault.elastic) {
    // The planner needs the model the run trains: the config's, checked against the data.
    Result<train::JobInputs> in = train::load_job_inputs(cfg);
    if (!in.ok()) return report_error("train", in.error());
    so.ranks = ranks;
    so.replan = elastic_replan(cfg, in->model, so.command);
  }
  if (cfg.checkpoint.dir.empty()) {
    log_warning(
        "fault.max_restarts without checkpoint.dir: every restart starts again from step 0 (and injected "
        "faults fire again); set --checkpoint.dir");
    return train::run_supervised(so);
  }
  // The supervisor owns checkpoint.dir for the whole job, across restarts (train/checkpoint/checkpoint_lock.h).
  Result<train::CheckpointDirLock> lock = train::CheckpointDirLock::acquire(cfg.checkpoint.dir, "herd train");
  if (!lock.ok()) return report_error("train", lock.error());
  return train::run_supervised(so);
}

int run_train(const TrainOptions& o, const std::vector<std::string>& overrides) {
  Result<train::TrainConfig> cfg = train::read_config(o.config, overrides);
  if (!cfg.ok()) return report_error("train", cfg.error());
  if (Status s = apply_flags(o, *cfg); !s.ok()) return report_error("train", s.error());
  if (Status s = train::validate(*cfg); !s.ok()) return report_error("train", s.error());
  if (o.print_config) {
    std::cout << json_text(train::to_json(*cfg), 2) << "\n";
    return 0;
  }
  if (Status s = train::check_run_device(*cfg); !s.ok()) return report_error("train", s.error());
  const Result<train::JobLaunch> launch = train::resolve_launch(*cfg, process_environment());
  if (!launch.ok()) return report_error("train", launch.error());
  // One rank per process (mpi, gloo): the launcher's rank count (0 where it exports none: MPI_Init gives it).
  const bool processes = launch->backend != comm::Backend::kLocal;
  const std::int64_t world = processes ? launch->env.world_size : 0;
  if (Status s = check_layout_flags(o, world); !s.ok()) return report_error("train", s.error());
  if (cfg->fault.elastic && cfg->fault.max_restarts < 1 && !o.supervised) {
    return report_error("train", make_error("fault.elastic restarts the job on the surviving ranks, but "
                                            "fault.max_restarts is ",
                                            cfg->fault.max_restarts, "; give --max-restarts K (K >= 1)"));
  }
  if (cfg->fault.max_restarts > 0 && !o.supervised) {
    if (launch->backend == comm::Backend::kMpi) {
      return report_error("train", make_error("fault.max_restarts (", cfg->fault.max_restarts,
                                              ") under mpirun: one dead rank ends mpirun itself, so the supervisor "
                                              "must sit outside it; run `herd launch -np N --max-restarts ",
                                              cfg->fault.max_restarts, " -- herd train ...`"));
    }
    if (processes) {
      return report_error("train",
                          make_error("fault.max_restarts (", cfg->fault.max_restarts, ") under ",
                                     launch_source_name(launch->env.source),
                                     ": the launcher restarts its processes, not herd; give it the restarts "
                                     "(torchrun --max-restarts ",
                                     cfg->fault.max_restarts, ", sbatch --requeue) and drop fault.max_restarts"));
    }
    return supervise(*cfg, o.layout ? o.ranks.value_or(usable_cores()) : cfg->parallel.world());
  }
  if (o.supervised) train::end_with_supervisor();  // an MPI rank under herd launch dies with it
  Result<train::JobInputs> in = train::load_job_inputs(*cfg);
  if (!in.ok()) return report_error("train", in.error());
  const bool lead = launch->lead();
  resolve_calibration(o, *cfg, lead && !o.print_config);
  if (Status s = choose_layout(o, *cfg, in->model, world, lead); !s.ok()) {
    return report_error("train", s.error());
  }
  // The layout, resolved and checked once for the whole start: every rank builds from it.
  const Result<train::JobLayout> layout =
      train::check_layout(*cfg, in->model, processes ? world : cfg->parallel.world());
  if (!layout.ok()) return report_error("train", layout.error());
  if (lead) {
    print_resolved(*cfg, in->model);
    if (in->data.val) {
      log_info("unigram entropy of the held-out tokens: ", format_fixed(train::unigram_entropy(*in->data.val), 3),
               " nats/token");
    }
  }
  const bool samples = !cfg->data.tokenizer.empty() && cfg->generate.samples > 0;
  // The samples are decoded with data.tokenizer: the file the shards were made with (meta.json's CRC-32).
  if (samples) {
    if (Status s = data::check_tokenizer_checksum(cfg->data.dir, cfg->data.tokenizer, "data.tokenizer"); !s.ok()) {
      return report_error("train", s.error());
    }
  }
  // SIGTERM/SIGUSR1: a checkpoint at the next step, then exit 143; SIGINT the same with exit 130.
  train::install_preemption_handlers();
  // One trainer; its element type is the master weights': double under fp64, float otherwise (bf16 keeps
  // fp32 masters and runs its bf16 copies inside the model, docs/precision.md).
  auto run = [&](auto tag) -> int {
    using T = decltype(tag);
    train::JobResult<T> out;
    out.exit_on_hang = true;  // this process is the job: a hung rank must not keep it alive
    Status s = train::run_job<T>(*cfg, *in, *layout, &out, o.stop_after, samples);
    if (!s.ok()) return report_error("train", s.error());
    if (out.preempted) return train::preemption_exit_code();
    if (lead && samples) print_samples<T>(*cfg, in->model, out.weights);
    return -1;
  };
  const int rc = cfg->train.precision == Precision::kFP64 ? run(double{}) : run(float{});
  if (rc >= 0) return rc;
  if (lead && !cfg->export_.hf.empty()) {
    // The last step saved a checkpoint and waited for it: export that one (docs/interop.md).
    Status e = train::export_hf(cfg->checkpoint.dir, cfg->export_.hf);
    if (!e.ok()) return report_error("train", e.error().with_context("export.hf"));
    log_info("export.hf: wrote ", cfg->export_.hf, " (Hugging Face layout) from ", cfg->checkpoint.dir);
  }
  return 0;
}

}  // namespace

Subcommand add_train_command(CLI::App& root) {
  auto opts = std::make_shared<TrainOptions>();
  CLI::App* app = root.add_subcommand(
      "train", "Train a Llama 3 model from `herd data` shards, on one rank or any TP x CP x PP x DP layout");
  app->add_option("config", opts->config, "JSON config file ({\"optim\": {\"lr\": 3e-3}, ...}); optional");
  app->add_option("--stop-after", opts->stop_after, "Stop after this step with a checkpoint (as a preempted job)");
  app->add_flag("--print-config", opts->print_config, "Print the resolved configuration as JSON and exit");
  app->add_option("--max-restarts", opts->max_restarts,
                  "Run under a supervisor that restarts a failed job up to K times from its newest checkpoint "
                  "(fault.max_restarts; with MPI use herd launch)")
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--supervised", opts->supervised, "")->group("");  // the supervisor's child
  app->add_option("--tp", opts->tp, "Tensor-parallel degree (parallel.tp)")->check(positive_integer());
  app->add_option("--cp", opts->cp, "Context-parallel degree (parallel.cp)")->check(positive_integer());
  app->add_option("--pp", opts->pp, "Pipeline-parallel degree (parallel.pp)")->check(positive_integer());
  app->add_option("--dp", opts->dp, "Data-parallel (FSDP) degree (parallel.dp)")->check(positive_integer());
  add_layout_knob_options(app, opts->knobs);
  app->add_option(
      "--init.from", opts->init_from,
      "Start from these weights: a Hugging Face directory or a herd checkpoint (init.from; docs/interop.md)");
  app->add_option("--export.hf", opts->export_hf,
                  "After training, write the final checkpoint here as a Hugging Face directory (export.hf)");
  app->add_option("--layout", opts->layout,
                  "auto: the planner chooses the fastest layout of --ranks ranks that fits (this machine's "
                  "calibration, fp32), prints its ranking and trains it");
  app->add_option("--ranks", opts->ranks,
                  "With --layout auto: how many ranks (default: the MPI world size, else the host's cores)")
      ->check(positive_integer());
  app->add_option("--calibration-dir", opts->calibration_dir,
                  "Where this machine's calibration is stored (herd calibrate; default: calibration/ beside herd)");
  app->add_option("--seq-len", opts->seq_len, "Tokens per sequence (data.seq_len)")->check(positive_integer());
  app->add_option("--global-batch", opts->global_batch, "Sequences per optimizer step (train.global_batch)")
      ->check(positive_integer());
  app->add_option("--schedule", opts->schedule,
                  "Pipeline schedule: flexible (Llama 3, default), interleaved, 1f1b, gpipe (parallel.schedule)");
  app->add_option("--backend", opts->backend,
                  "local (ranks as threads), mpi (under mpirun or srun --mpi=pmix), gloo (under torchrun or srun "
                  "without PMIx) or auto (parallel.backend)");
  app->add_option("--precision", opts->precision,
                  "fp32 (default), bf16 (the Llama 3 recipe: bf16 weight copies and matmul inputs, fp32 master "
                  "weights, optimizer, gradient accumulation and reduce-scatter) or fp64 (train.precision; "
                  "docs/precision.md)");
  app->add_option("--device", opts->device,
                  "Where the kernels run: cpu (default) or cuda (an NVIDIA GPU; train.device; docs/gpu.md)");
  app->allow_extras();
  app->footer(
      "Every field of the configuration can be overridden as --section.field=value, e.g. --optim.lr=1e-3 "
      "--train.steps=500; --print-config prints them as JSON, and every run starts with a table of each field "
      "and its meaning. Sections: model, data, optim, schedule, train, eval, checkpoint, generate, parallel, "
      "fault (injected faults, max_restarts), comm (deterministic, recorder_size: the communicator), diagnostics "
      "(dir, job_id: flight-recorder dumps), projection (cluster_file: a herd calibrate output; background_jobs: -1 "
      "measures, 0 declares an idle host). The "
      "layout flags are those of herd estimate and herd plan, so the layout line herd plan prints runs as it "
      "is. See docs/training.md and docs/distributed.md.");
  return {app, [opts, app] { return run_train(*opts, app->remaining()); }};
}

}  // namespace herd::cli
