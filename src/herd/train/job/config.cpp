// The field registry behind TrainConfig: one line per field binds its key, its member and its doc.
#include "herd/train/job/config.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <type_traits>

#include "herd/kernels/device.h"
#include "herd/model/flops.h"
#include "herd/model/shard.h"

namespace herd::train {

namespace {

struct Field {
  std::string key;  // "optim.lr"
  std::string doc;
  std::function<Status(TrainConfig&, const Json&, const std::string&)> set;
  std::function<Json(const TrainConfig&)> get;
  bool is_string = false;
};

template <typename T>
Result<T> convert(const Json& v, const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) {
    if (v.is_boolean()) return v.get<bool>();
    return make_error(key, ": expected true or false, got ", json_preview(v));
  } else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, int>) {
    const double limit = std::is_same_v<T, int> ? 2e9 : 9e15;
    if (v.is_number_unsigned() && v.get<std::uint64_t>() >= static_cast<std::uint64_t>(limit)) {
      // Above 2^63 the int64 read below would wrap to a negative number.
    } else if (v.is_number_integer()) {
      const std::int64_t i = v.get<std::int64_t>();
      if (std::fabs(static_cast<double>(i)) < limit) return static_cast<T>(i);
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < limit) return static_cast<T>(d);
    }
    return make_error(key, ": expected an integer, got ", json_preview(v));
  } else if constexpr (std::is_same_v<T, double>) {
    if (v.is_number()) return v.get<double>();
    return make_error(key, ": expected a number, got ", json_preview(v));
  } else {
    if (v.is_string()) return v.get<std::string>();
    return make_error(key, ": expected a string, got ", json_preview(v));
  }
}

template <typename S, typename T>
Field bind_field(const std::string& key, S TrainConfig::*section, T S::*member, const std::string& doc) {
  Field f;
  f.key = key;
  f.doc = doc;
  f.is_string = std::is_same_v<T, std::string>;
  f.set = [section, member](TrainConfig& c, const Json& v, const std::string& full_key) -> Status {
    HERD_ASSIGN_OR_RETURN(T value, convert<T>(v, full_key));
    (c.*section).*member = value;
    return Status::Ok();
  };
  f.get = [section, member](const TrainConfig& c) { return Json((c.*section).*member); };
  return f;
}

// A knob of the run's layout (planner::Layout, the base of ParallelSection).
template <typename T>
Field bind_layout(const std::string& key, T planner::Layout::*member, const std::string& doc) {
  Field f;
  f.key = key;
  f.doc = doc;
  f.set = [member](TrainConfig& c, const Json& v, const std::string& full_key) -> Status {
    HERD_ASSIGN_OR_RETURN(T value, convert<T>(v, full_key));
    static_cast<planner::Layout&>(c.parallel).*member = value;
    return Status::Ok();
  };
  f.get = [member](const TrainConfig& c) { return Json(static_cast<const planner::Layout&>(c.parallel).*member); };
  return f;
}

// A layout knob the config spells by name (an enum of the planner's): parsed with `parse`, printed with
// `name`, a bad name refused with the field's key.
template <typename E>
Field named_layout_field(const char* key, const char* doc, E planner::Layout::*member,
                         Result<E> (*parse)(const std::string&), const char* (*name)(E)) {
  Field f;
  f.key = key;
  f.doc = doc;
  f.is_string = true;
  f.set = [member, parse](TrainConfig& c, const Json& v, const std::string& full_key) -> Status {
    HERD_ASSIGN_OR_RETURN(std::string s, convert<std::string>(v, full_key));
    Result<E> e = parse(s);
    if (!e.ok()) return e.error().with_context(full_key);
    static_cast<planner::Layout&>(c.parallel).*member = *e;
    return Status::Ok();
  };
  f.get = [member, name](const TrainConfig& c) {
    return Json(name(static_cast<const planner::Layout&>(c.parallel).*member));
  };
  return f;
}

Field precision_field() {
  Field f;
  f.key = "train.precision";
  f.doc =
      "fp32, bf16 (bf16 weight copies and matmul inputs, fp32 master, optimizer, gradient accumulation and "
      "reduce-scatter; docs/precision.md) or fp64";
  f.is_string = true;
  f.set = [](TrainConfig& c, const Json& v, const std::string& full_key) -> Status {
    HERD_ASSIGN_OR_RETURN(std::string s, convert<std::string>(v, full_key));
    HERD_ASSIGN_OR_RETURN(c.train.precision, parse_run_precision(s));
    return Status::Ok();
  };
  f.get = [](const TrainConfig& c) { return Json(precision_name(c.train.precision)); };
  return f;
}

const std::vector<Field>& registry() {
  using C = TrainConfig;
  static const std::vector<Field> fields = {
      bind_field("model.name", &C::model, &ModelSection::name, "preset (tiny, small, llama3-8b, ...) or config.json"),
      bind_field("model.vocab", &C::model, &ModelSection::vocab, "vocabulary size; 0 takes the tokenizer's"),
      bind_field("data.dir", &C::data, &DataSection::dir, "token shards written by herd data"),
      bind_field("data.tokenizer", &C::data, &DataSection::tokenizer, "tokenizer of the shards (for samples)"),
      bind_field("data.seq_len", &C::data, &DataSection::seq_len, "tokens per packed sequence"),
      bind_field("data.seed", &C::data, &DataSection::seed, "document order seed"),
      bind_layout("parallel.tp", &planner::Layout::tp, "tensor-parallel degree"),
      bind_layout("parallel.cp", &planner::Layout::cp, "context-parallel degree"),
      bind_layout("parallel.pp", &planner::Layout::pp, "pipeline-parallel degree"),
      bind_layout("parallel.dp", &planner::Layout::dp, "data-parallel (FSDP) degree"),
      bind_layout("parallel.v", &planner::Layout::v, "virtual pipeline stages per rank"),
      bind_layout("parallel.microbatch_size", &planner::Layout::microbatch,
                  "sequences per micro-batch on one data-parallel rank; 0: M = pp (1 without a pipeline)"),
      bind_layout("parallel.n", &planner::Layout::n, "micro-batches per chunk before switching (N); 0: min(pp, M)"),
      named_layout_field("parallel.recompute", "activation recompute: none, selective, full",
                         &planner::Layout::recompute, model::parse_recompute, model::recompute_name),
      bind_layout("parallel.sequence_parallel", &planner::Layout::sequence_parallel,
                  "sequence parallelism inside TP groups"),
      bind_layout("parallel.reshard_after_forward", &planner::Layout::reshard_after_forward,
                  "FSDP: free gathered weights after forward, gather again for backward"),
      named_layout_field("parallel.schedule", "pipeline schedule: flexible (Llama 3), interleaved, 1f1b or gpipe",
                         &planner::Layout::schedule, schedule::parse_schedule_kind, schedule::schedule_kind_name),
      bind_field("parallel.backend", &C::parallel, &ParallelSection::backend,
                 "local, mpi, gloo or auto (mpi under mpirun or srun --mpi=pmix, gloo under torchrun or srun "
                 "without PMIx)"),
      bind_field("parallel.rendezvous_dir", &C::parallel, &ParallelSection::rendezvous_dir,
                 "where a gloo job's processes meet: storage every host sees; empty: <checkpoint.dir>/rendezvous, "
                 "else the temp dir"),
      bind_field("parallel.comm_timeout_s", &C::parallel, &ParallelSection::comm_timeout_s,
                 "seconds a collective may wait, or a rank stay silent, before the job stops; 0: fitted to the "
                 "planner's step time"),
      bind_field("optim.lr", &C::optim, &OptimSection::lr, "peak learning rate"),
      bind_field("optim.min_lr_ratio", &C::optim, &OptimSection::min_lr_ratio,
                 "cosine floor as a fraction of the peak"),
      bind_field("optim.beta1", &C::optim, &OptimSection::beta1, "AdamW first-moment decay"),
      bind_field("optim.beta2", &C::optim, &OptimSection::beta2, "AdamW second-moment decay"),
      bind_field("optim.eps", &C::optim, &OptimSection::eps, "AdamW denominator epsilon"),
      bind_field("optim.weight_decay", &C::optim, &OptimSection::weight_decay, "decoupled weight decay"),
      bind_field("optim.grad_clip", &C::optim, &OptimSection::grad_clip, "max global gradient norm; 0 disables"),
      bind_field("schedule.warmup_steps", &C::schedule, &ScheduleSection::warmup_steps, "linear warm-up steps"),
      bind_field("schedule.decay_steps", &C::schedule, &ScheduleSection::decay_steps, "cosine steps; 0: until the end"),
      bind_field("schedule.ramp", &C::schedule, &ScheduleSection::ramp, "paper's batch and sequence-length ramp"),
      bind_field("schedule.ramp_tokens", &C::schedule, &ScheduleSection::ramp_tokens,
                 "tokens at 1/4 batch, 1/2 length"),
      bind_field("schedule.ramp_tokens2", &C::schedule, &ScheduleSection::ramp_tokens2, "tokens until the full batch"),
      bind_field("train.steps", &C::train, &TrainSection::steps, "optimizer steps"),
      bind_field("train.global_batch", &C::train, &TrainSection::global_batch,
                 "sequences per optimizer step (any layout)"),
      bind_field("train.threads", &C::train, &TrainSection::threads, "kernel threads per rank; 0: cores / ranks"),
      bind_field("train.seed", &C::train, &TrainSection::seed, "weight initialisation seed"),
      bind_field("train.log_every", &C::train, &TrainSection::log_every, "progress line period in steps"),
      bind_field("train.metrics_file", &C::train, &TrainSection::metrics_file, "JSON-lines metrics; empty: none"),
      bind_field("train.projection_file", &C::train, &TrainSection::projection_file,
                 "JSON of planned vs measured step time and memory (docs/projection.md); empty: none"),
      bind_field("train.peak_gflops_per_core", &C::train, &TrainSection::peak_gflops_per_core,
                 "fp32 peak of one core for MFU (x 2 under bf16); 0: the calibrated per-core GEMM rate of the "
                 "run's precision (this machine's calibration, else the local-cpu preset)"),
      precision_field(),
      bind_field("train.device", &C::train, &TrainSection::device,
                 "where the kernels run: cpu, or cuda (an NVIDIA GPU; docs/gpu.md)"),
      bind_field("train.nonfinite", &C::train, &TrainSection::nonfinite,
                 "a NaN/Inf loss or gradient norm: skip the step (no update) or stop the job"),
      bind_field("train.max_nonfinite_skips", &C::train, &TrainSection::max_nonfinite_skips,
                 "consecutive skipped non-finite steps after which the job stops"),
      bind_field("eval.every", &C::eval, &EvalSection::every, "steps between evaluations; 0: at the end only"),
      bind_field("eval.batches", &C::eval, &EvalSection::batches, "micro-batches per evaluation"),
      bind_field("checkpoint.dir", &C::checkpoint, &CheckpointSection::dir, "checkpoint directory; empty: none"),
      bind_field("checkpoint.every", &C::checkpoint, &CheckpointSection::every, "steps between checkpoints"),
      bind_field("checkpoint.keep", &C::checkpoint, &CheckpointSection::keep, "newest checkpoints kept"),
      bind_field("checkpoint.resume", &C::checkpoint, &CheckpointSection::resume, "resume from the newest in dir"),
      bind_field("checkpoint.fallback", &C::checkpoint, &CheckpointSection::fallback,
                 "on a corrupt newest checkpoint, use the previous good one"),
      bind_field("checkpoint.async", &C::checkpoint, &CheckpointSection::async,
                 "write from a host snapshot on a background thread while training continues"),
      bind_field("checkpoint.on_error", &C::checkpoint, &CheckpointSection::on_error,
                 "a failed save (disk full, read-only): stop the job, or continue (warn, retry at the next)"),
      bind_field("init.from", &C::init, &InitSection::from,
                 "start from these weights (a Hugging Face directory or a herd checkpoint; fresh optimizer); "
                 "empty: train.seed's initialisation"),
      bind_field("export.hf", &C::export_, &ExportSection::hf,
                 "after training, write the final checkpoint here as a Hugging Face directory (needs "
                 "checkpoint.dir); empty: none"),
      bind_field("generate.samples", &C::generate, &GenerateSection::samples, "samples printed after training"),
      bind_field("generate.max_tokens", &C::generate, &GenerateSection::max_tokens, "tokens per sample"),
      bind_field("generate.prompt", &C::generate, &GenerateSection::prompt, "prompt of the samples"),
      bind_field("fault.kill_rank", &C::fault, &FaultSection::kill_rank,
                 "rank that exits at fault.kill_step; -1: none"),
      bind_field("fault.kill_step", &C::fault, &FaultSection::kill_step, "step at whose start the rank exits"),
      bind_field("fault.hang_rank", &C::fault, &FaultSection::hang_rank,
                 "rank that stops at fault.hang_step; -1: none"),
      bind_field("fault.hang_step", &C::fault, &FaultSection::hang_step, "step at whose start the rank stops"),
      bind_field("fault.hang_seconds", &C::fault, &FaultSection::hang_seconds, "how long the rank stops"),
      bind_field("fault.fail_checkpoint_step", &C::fault, &FaultSection::fail_checkpoint_step,
                 "the checkpoint save at this step fails as a full disk would (once per job); 0: none"),
      bind_field("fault.nan_step", &C::fault, &FaultSection::nan_step,
                 "fault.nan_rank's gradient gets a NaN at this step (once per job); 0: none"),
      bind_field("fault.nan_rank", &C::fault, &FaultSection::nan_rank,
                 "the rank whose gradient fault.nan_step poisons"),
      bind_field("fault.slow_rank", &C::fault, &FaultSection::slow_rank,
                 "rank whose steps take fault.slow_factor x longer; -1: none"),
      bind_field("fault.slow_factor", &C::fault, &FaultSection::slow_factor,
                 "how much longer the slow rank's steps take"),
      bind_field("fault.slow_from_step", &C::fault, &FaultSection::slow_from_step, "first step of the slow rank"),
      bind_field("fault.slow_mode", &C::fault, &FaultSection::slow_mode,
                 "compute: the slow rank computes the extra time (a slower core); stall: it sleeps it (stopped or "
                 "preempted: off the CPU)"),
      bind_field("fault.kill_every", &C::fault, &FaultSection::kill_every,
                 "every K steps a rank drawn from fault.seed exits; 0: never"),
      bind_field("fault.seed", &C::fault, &FaultSection::seed, "draws the ranks of fault.kill_every"),
      bind_field("fault.corrupt_checkpoint", &C::fault, &FaultSection::corrupt_checkpoint,
                 "an injected kill first flips a byte of its shard of the newest checkpoint"),
      bind_field("fault.lose_rank", &C::fault, &FaultSection::lose_rank,
                 "rank lost for good (its host does not come back) at fault.lose_step; -1: none"),
      bind_field("fault.lose_step", &C::fault, &FaultSection::lose_step, "step at whose start the rank is lost"),
      bind_field("fault.elastic", &C::fault, &FaultSection::elastic,
                 "after a rank is lost for good, the supervisor restarts on the survivors at the fastest layout "
                 "that fits (same global batch); false: it waits for the same layout"),
      bind_field("fault.max_restarts", &C::fault, &FaultSection::max_restarts,
                 "restarts of a failed job by the supervisor (herd train --max-restarts); 0: none"),
      bind_field("fault.restart_backoff_s", &C::fault, &FaultSection::restart_backoff_s,
                 "wait before a restart; doubles while attempts fail before their first step (at most 60 s)"),
      bind_field("comm.deterministic", &C::comm, &CommSection::deterministic,
                 "fixed rank-order reductions, bit-exact; false: MPI's native collectives (gloo: always fixed-order)"),
      bind_field("comm.recorder_size", &C::comm, &CommSection::recorder_size, "flight-recorder entries per rank"),
      bind_field("launch.rank", &C::launch, &LaunchSection::rank,
                 "this process's rank, for processes started by hand (overrides the launcher's variables); -1: "
                 "from the launcher"),
      bind_field("launch.world_size", &C::launch, &LaunchSection::world_size, "the job's processes, with launch.rank"),
      bind_field("launch.local_rank", &C::launch, &LaunchSection::local_rank, "this process among its host's"),
      bind_field("launch.local_world_size", &C::launch, &LaunchSection::local_world_size,
                 "the job's processes on this host"),
      bind_field("launch.master_addr", &C::launch, &LaunchSection::master_addr,
                 "rank 0's host: with launch.master_port, the name the processes meet under"),
      bind_field("launch.master_port", &C::launch, &LaunchSection::master_port, "a port, with launch.master_addr"),
      bind_field("diagnostics.dir", &C::diagnostics, &DiagnosticsSection::dir,
                 "flight-recorder dumps of a failed job; empty: <checkpoint.dir>/diagnostics, else beside "
                 "train.metrics_file, else the temp dir"),
      bind_field("diagnostics.job_id", &C::diagnostics, &DiagnosticsSection::job_id,
                 "the job's id in dump names; empty: made at start (the supervisor passes its own)"),
      bind_field("diagnostics.dump_every", &C::diagnostics, &DiagnosticsSection::dump_every,
                 "every rank also dumps its flight recorder every N steps (herd trace reads them); 0: on failures, "
                 "SIGUSR1 and SIGUSR2 only"),
      bind_field("diagnostics.straggler_every", &C::diagnostics, &DiagnosticsSection::straggler_every,
                 "steps between straggler checks (the ranks' busy times ride on the step's control all-reduce); "
                 "0: off"),
      bind_field("diagnostics.straggler_window", &C::diagnostics, &DiagnosticsSection::straggler_window,
                 "steps each rank's median busy time is taken over"),
      bind_field("diagnostics.straggler_threshold", &C::diagnostics, &DiagnosticsSection::straggler_threshold,
                 "a rank whose CPU time computing is this factor x its pipeline stage's peers' median at three checks "
                 "in a row is a (slow) straggler"),
      bind_field("diagnostics.straggler_stall_threshold", &C::diagnostics,
                 &DiagnosticsSection::straggler_stall_threshold,
                 "a rank whose time computing or stalled (stopped, asleep, blocked outside collectives) is this factor "
                 "x its peers' median at three checks in a row is a (stalled) straggler"),
      bind_field(
          "projection.cluster_file", &C::projection, &ProjectionSection::cluster_file,
          "herd calibrate output to plan with; empty: this machine's stored calibration, else the local-cpu preset"),
      bind_field("projection.background_jobs", &C::projection, &ProjectionSection::background_jobs,
                 "other jobs on the cores; -1: measured, 0: idle host"),
      bind_field("projection.speed_probe", &C::projection, &ProjectionSection::speed_probe,
                 "probe the host's GEMM speed before the first step and after the last, and plan at its ratio to the "
                 "calibration's (about 0.1 s each; ranks as threads only; off: too noisy on these hosts, "
                 "docs/projection.md)"),
  };
  return fields;
}

const Field* find(const std::string& key) {
  for (const Field& f : registry()) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

std::string keys_of(const std::string& section) {
  std::string out;
  for (const Field& f : registry()) {
    if (f.key.rfind(section + ".", 0) == 0) out += (out.empty() ? "" : ", ") + f.key.substr(section.size() + 1);
  }
  return out;
}

// Keys of earlier versions, with what replaced them (a config written for them fails with the fix).
const char* renamed(const std::string& key) {
  if (key == "train.micro_batch") {
    return "was the global sequences per micro-batch; set train.global_batch (sequences per step) and "
           "parallel.microbatch_size (sequences per micro-batch on one data-parallel rank)";
  }
  if (key == "train.grad_accum") {
    return "is now derived: M = train.global_batch / (parallel.dp x parallel.microbatch_size)";
  }
  if (key == "train.recompute") return "is now parallel.recompute";
  if (key == "parallel.pp_n") return "is now parallel.n (default min(pp, M), as the planner's)";
  if (key == "parallel.pp_schedule") return "is now parallel.schedule";
  if (key == "comm.dump_dir") {
    return "is now diagnostics.dir (where every rank writes its flight-recorder dump); set --diagnostics.dir=DIR";
  }
  return nullptr;
}

Error unknown_key(const std::string& key, const std::string& source) {
  if (const char* r = renamed(key)) return make_error(source, key, " ", r);
  const std::string section = key.substr(0, key.find('.'));
  const std::string known = keys_of(section);
  if (known.empty()) {
    return make_error(source, "unknown section '", section,
                      "'; sections are model, data, parallel, optim, schedule, train, eval, checkpoint, "
                      "init, export, generate, fault, comm, diagnostics, projection");
  }
  return make_error(source, "unknown key '", key, "'; ", section, " has ", known);
}

}  // namespace

std::vector<FieldInfo> describe(const TrainConfig& cfg) {
  std::vector<FieldInfo> out;
  for (const Field& f : registry()) out.push_back({f.key, f.doc, f.get(cfg)});
  return out;
}

Status apply_json(TrainConfig& cfg, const Json& j, const std::string& source) {
  const std::string where = source.empty() ? "" : source + ": ";
  if (!j.is_object()) return make_error(where, "expected a JSON object of sections, got ", json_preview(j));
  for (auto sec = j.begin(); sec != j.end(); ++sec) {
    if (!sec.value().is_object()) {
      if (keys_of(sec.key()).empty()) return unknown_key(sec.key(), where);
      return make_error(where, sec.key(), ": expected an object of fields, got ", json_preview(sec.value()));
    }
    for (auto it = sec.value().begin(); it != sec.value().end(); ++it) {
      const std::string key = sec.key() + "." + it.key();
      const Field* f = find(key);
      if (!f) return unknown_key(key, where);
      Status s = f->set(cfg, it.value(), key);
      if (!s.ok()) return s.error().with_context(source.empty() ? "config" : source);
    }
  }
  return Status::Ok();
}

Status apply_override(TrainConfig& cfg, const std::string& arg) {
  std::string a = arg.rfind("--", 0) == 0 ? arg.substr(2) : arg;
  const std::size_t eq = a.find('=');
  if (eq == std::string::npos || a.find('.') > eq) {
    return make_error("override '", arg, "': expected --section.field=value, e.g. --optim.lr=1e-3");
  }
  const std::string key = a.substr(0, eq);
  const std::string text = a.substr(eq + 1);
  const Field* f = find(key);
  if (!f) return unknown_key(key, "override: ");
  Json v;
  if (f->is_string) {
    v = text;
  } else {
    Result<Json> parsed = parse_json_text(text, "--" + key);
    // Text that is not JSON is reported by the typed setter as "expected a number, got ...".
    v = parsed.ok() ? std::move(parsed).value() : Json(text);
  }
  return f->set(cfg, v, "--" + key);
}

Status validate(const TrainConfig& c) {
  auto positive = [](std::int64_t v, const char* key) -> Status {
    if (v <= 0) return make_error(key, ": must be positive, got ", v);
    return Status::Ok();
  };
  HERD_RETURN_IF_ERROR(positive(c.data.seq_len, "data.seq_len"));
  HERD_RETURN_IF_ERROR(positive(c.train.steps, "train.steps"));
  HERD_RETURN_IF_ERROR(positive(c.train.global_batch, "train.global_batch"));
  HERD_RETURN_IF_ERROR(positive(c.train.log_every, "train.log_every"));
  HERD_RETURN_IF_ERROR(positive(c.eval.batches, "eval.batches"));
  HERD_RETURN_IF_ERROR(positive(c.checkpoint.every, "checkpoint.every"));
  HERD_RETURN_IF_ERROR(positive(c.checkpoint.keep, "checkpoint.keep"));
  if (!(c.optim.lr > 0)) return make_error("optim.lr: must be positive, got ", c.optim.lr);
  if (c.optim.min_lr_ratio < 0 || c.optim.min_lr_ratio > 1) {
    return make_error("optim.min_lr_ratio: must be in [0, 1], got ", c.optim.min_lr_ratio);
  }
  if (c.optim.beta1 < 0 || c.optim.beta1 >= 1) return make_error("optim.beta1: must be in [0, 1), got ", c.optim.beta1);
  if (c.optim.beta2 < 0 || c.optim.beta2 >= 1) return make_error("optim.beta2: must be in [0, 1), got ", c.optim.beta2);
  if (!(c.optim.eps > 0)) return make_error("optim.eps: must be positive, got ", c.optim.eps);
  if (c.optim.weight_decay < 0) return make_error("optim.weight_decay: must be >= 0, got ", c.optim.weight_decay);
  if (c.optim.grad_clip < 0) return make_error("optim.grad_clip: must be >= 0 (0 disables), got ", c.optim.grad_clip);
  if (c.schedule.warmup_steps < 0) {
    return make_error("schedule.warmup_steps: must be >= 0, got ", c.schedule.warmup_steps);
  }
  if (c.schedule.decay_steps < 0) return make_error("schedule.decay_steps: must be >= 0, got ", c.schedule.decay_steps);
  if (c.schedule.ramp && c.data.seq_len % 2 != 0) {
    return make_error("data.seq_len (", c.data.seq_len, ") must be even with schedule.ramp");
  }
  for (const auto& [value, key] : {std::pair{c.launch.rank, "launch.rank"},
                                   {c.launch.world_size, "launch.world_size"},
                                   {c.launch.local_rank, "launch.local_rank"},
                                   {c.launch.local_world_size, "launch.local_world_size"},
                                   {c.launch.master_port, "launch.master_port"}}) {
    if (value < -1 || value > (std::int64_t{1} << 20)) {
      return make_error(key, " (", value, ") is out of range; give a count or rank below 1048576 (-1: not given)");
    }
  }
  HERD_RETURN_IF_ERROR(positive(c.parallel.tp, "parallel.tp"));
  HERD_RETURN_IF_ERROR(positive(c.parallel.cp, "parallel.cp"));
  HERD_RETURN_IF_ERROR(positive(c.parallel.pp, "parallel.pp"));
  HERD_RETURN_IF_ERROR(positive(c.parallel.dp, "parallel.dp"));
  HERD_RETURN_IF_ERROR(positive(c.parallel.v, "parallel.v"));
  if (c.parallel.microbatch < 0) {
    return make_error("parallel.microbatch_size: must be >= 0 (0 = M of pp), got ", c.parallel.microbatch);
  }
  if (c.parallel.n < 0) return make_error("parallel.n: must be >= 0 (0 = min(pp, M)), got ", c.parallel.n);
  if (c.parallel.zero != 3) {
    return make_error("parallel.zero (", c.parallel.zero, "): herd's runtime shards as FSDP (3) only; set 3");
  }
  if (c.parallel.backend != "auto" && c.parallel.backend != "local" && c.parallel.backend != "mpi" &&
      c.parallel.backend != "gloo") {
    return make_error("parallel.backend: '", c.parallel.backend, "' is unknown; use local, mpi, gloo or auto");
  }
  if (!(c.parallel.comm_timeout_s >= 0)) {
    return make_error("parallel.comm_timeout_s: must be >= 0 (0: fitted to the run), got ", c.parallel.comm_timeout_s);
  }
  if (c.train.threads < 0) return make_error("train.threads: must be >= 0, got ", c.train.threads);
  if (Result<kernels::Device> d = train_device(c); !d.ok()) return d.error();
  if (!(c.train.peak_gflops_per_core >= 0) || !std::isfinite(c.train.peak_gflops_per_core)) {
    return make_error("train.peak_gflops_per_core: must be >= 0 (0: the calibrated rate), got ",
                      c.train.peak_gflops_per_core);
  }
  if (c.eval.every < 0) return make_error("eval.every: must be >= 0, got ", c.eval.every);
  if (c.model.vocab < 0) return make_error("model.vocab: must be >= 0, got ", c.model.vocab);
  if (c.generate.samples < 0 || c.generate.max_tokens < 0) {
    return make_error("generate.samples and generate.max_tokens: must be >= 0");
  }
  for (const auto& [rank, key] : {std::pair{c.fault.kill_rank, "fault.kill_rank"},
                                  {c.fault.hang_rank, "fault.hang_rank"},
                                  {c.fault.slow_rank, "fault.slow_rank"},
                                  {c.fault.lose_rank, "fault.lose_rank"}}) {
    if (rank < -1 || rank >= c.parallel.world()) {
      return make_error(key, " (", rank, ") is not a rank of the ", c.parallel.world(), "-rank job; use -1 (none) to ",
                        c.parallel.world() - 1);
    }
  }
  if (!(c.fault.hang_seconds >= 0)) return make_error("fault.hang_seconds: must be >= 0, got ", c.fault.hang_seconds);
  if (c.fault.nan_rank < 0 || c.fault.nan_rank >= c.parallel.world()) {
    return make_error("fault.nan_rank (", c.fault.nan_rank, ") is not a rank of the ", c.parallel.world(),
                      "-rank job; use 0 to ", c.parallel.world() - 1);
  }
  if (c.fault.nan_step < 0) return make_error("fault.nan_step: must be >= 0 (0: none), got ", c.fault.nan_step);
  if (c.fault.lose_rank >= 0 && c.fault.lose_step < 1) {
    return make_error("fault.lose_rank (", c.fault.lose_rank, ") needs fault.lose_step >= 1, got ", c.fault.lose_step,
                      "; set --fault.lose_step=S");
  }

  if (c.fault.fail_checkpoint_step < 0) {
    return make_error("fault.fail_checkpoint_step: must be >= 0 (0: none), got ", c.fault.fail_checkpoint_step);
  }
  if (!c.export_.hf.empty() && c.checkpoint.dir.empty()) {
    return make_error("export.hf '", c.export_.hf,
                      "' exports the final checkpoint, but checkpoint.dir is empty; set "
                      "--checkpoint.dir=DIR");
  }
  if (c.checkpoint.on_error != "stop" && c.checkpoint.on_error != "continue") {
    return make_error("checkpoint.on_error: '", c.checkpoint.on_error, "' is unknown; use stop or continue");
  }
  if (c.train.nonfinite != "skip" && c.train.nonfinite != "stop") {
    return make_error("train.nonfinite: '", c.train.nonfinite, "' is unknown; use skip or stop");
  }
  if (c.train.max_nonfinite_skips < 0) {
    return make_error("train.max_nonfinite_skips: must be >= 0, got ", c.train.max_nonfinite_skips);
  }
  if (!(c.fault.slow_factor >= 1)) {
    return make_error("fault.slow_factor: must be >= 1 (1: not slowed), got ", c.fault.slow_factor);
  }
  HERD_RETURN_IF_ERROR(positive(c.fault.slow_from_step, "fault.slow_from_step"));
  if (c.fault.slow_mode != "compute" && c.fault.slow_mode != "stall") {
    return make_error("fault.slow_mode: '", c.fault.slow_mode, "' is unknown; use compute or stall");
  }
  if (c.fault.kill_every < 0) return make_error("fault.kill_every: must be >= 0 (0: never), got ", c.fault.kill_every);
  if (c.fault.max_restarts < 0) {
    return make_error("fault.max_restarts: must be >= 0 (0: no supervisor), got ", c.fault.max_restarts);
  }
  if (!(c.fault.restart_backoff_s >= 0)) {
    return make_error("fault.restart_backoff_s: must be >= 0, got ", c.fault.restart_backoff_s);
  }
  for (char ch : c.diagnostics.job_id) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') {
      return make_error("diagnostics.job_id '", c.diagnostics.job_id,
                        "': use letters, digits, '-', '_' and '.' only (it names files)");
    }
  }
  if (c.diagnostics.dump_every < 0) {
    return make_error("diagnostics.dump_every: must be >= 0 (0: dumps on failures only), got ",
                      c.diagnostics.dump_every);
  }
  if (c.diagnostics.straggler_every < 0) {
    return make_error("diagnostics.straggler_every: must be >= 0 (0: no straggler detection), got ",
                      c.diagnostics.straggler_every);
  }
  HERD_RETURN_IF_ERROR(positive(c.diagnostics.straggler_window, "diagnostics.straggler_window"));
  if (!(c.diagnostics.straggler_threshold > 1) || !std::isfinite(c.diagnostics.straggler_threshold)) {
    return make_error(
        "diagnostics.straggler_threshold: must be a finite factor above 1 (1.3: 30% more CPU time than the "
        "peers), got ",
        c.diagnostics.straggler_threshold);
  }
  if (!(c.diagnostics.straggler_stall_threshold > 1) || !std::isfinite(c.diagnostics.straggler_stall_threshold)) {
    return make_error(
        "diagnostics.straggler_stall_threshold: must be a finite factor above 1 (2: twice the peers' time "
        "computing or stalled), got ",
        c.diagnostics.straggler_stall_threshold);
  }
  HERD_RETURN_IF_ERROR(positive(c.comm.recorder_size, "comm.recorder_size"));
  if (c.projection.background_jobs < 0 && c.projection.background_jobs != -1) {
    return make_error("projection.background_jobs: must be >= 0, or -1 to measure, got ", c.projection.background_jobs);
  }
  return Status::Ok();
}

Result<Precision> parse_run_precision(const std::string& name) {
  const std::optional<Precision> p = precision_from_name(name);
  if (p == Precision::kFP32 || p == Precision::kBF16 || p == Precision::kFP64) return *p;
  return make_error("train.precision: expected fp32, bf16 or fp64, got '", name, "'");
}

Result<kernels::Device> train_device(const TrainConfig& cfg) {
  const std::optional<kernels::Device> d = kernels::parse_device(cfg.train.device);
  if (!d) return make_error("train.device: expected cpu or cuda, got '", cfg.train.device, "'");
  return *d;
}

Status check_run_device(const TrainConfig& cfg) {
  HERD_ASSIGN_OR_RETURN(const kernels::Device d, train_device(cfg));
  HERD_RETURN_IF_ERROR(kernels::check_device(d, "train.device"));
  if (d == kernels::Device::kCpu) return Status::Ok();
  // The device's op interface runs fp32 and bf16; fp64 is the CPU's reference precision.
  if (cfg.train.precision == Precision::kFP64) {
    return make_error("train.precision: fp64 runs on the CPU only, got train.device=", kernels::device_name(d),
                      "; use train.precision=fp32 or bf16 there, or train.device=cpu");
  }
  return Status::Ok();
}

Precision planned_precision(const TrainConfig& cfg) {
  return cfg.train.precision == Precision::kBF16 ? Precision::kBF16 : Precision::kFP32;
}

Result<ResolvedLayout> resolve_layout(const TrainConfig& cfg) {
  ResolvedLayout r;
  r.layout = cfg.parallel;
  r.spec.seq_len = cfg.data.seq_len;
  r.spec.global_batch = cfg.train.global_batch;
  r.spec.precision = planned_precision(cfg);
  planner::Layout& l = r.layout;
  const std::int64_t gb = cfg.train.global_batch;
  const model::BatchFieldNames names{"train.global_batch", "parallel.dp", "parallel.microbatch_size"};
  HERD_RETURN_IF_ERROR(model::check_dp_divides_batch(gb, l.dp, 1, names));
  if (l.microbatch == 0) {
    const std::int64_t m = l.pp > 1 ? l.pp : 1;
    if (gb % (l.dp * m) != 0) {
      return make_error("train.global_batch (", gb, ") is not divisible by parallel.dp (", l.dp, ") x M (", m,
                        ", the default of a ", l.pp,
                        "-stage pipeline); set parallel.microbatch_size or a batch "
                        "that is a multiple of ",
                        l.dp * m);
    }
    l.microbatch = gb / (l.dp * m);
  }
  HERD_RETURN_IF_ERROR(model::check_dp_divides_batch(gb, l.dp, l.microbatch, names));
  r.microbatches = gb / (l.dp * l.microbatch);
  if (l.n > r.microbatches) {
    return make_error("parallel.n (", l.n, ") must be at most M = ", r.microbatches,
                      " (train.global_batch / (dp x microbatch_size)); lower it or raise the batch");
  }
  l.n = l.n_resolved(r.spec);
  return r;
}

Result<TrainConfig> read_config(const std::string& path, const std::vector<std::string>& overrides) {
  TrainConfig cfg;
  if (!path.empty()) {
    HERD_ASSIGN_OR_RETURN(Json j, read_json_file(path));
    HERD_RETURN_IF_ERROR(apply_json(cfg, j, path));
  }
  for (const std::string& o : overrides) HERD_RETURN_IF_ERROR(apply_override(cfg, o));
  return cfg;
}

Result<TrainConfig> load_config(const std::string& path, const std::vector<std::string>& overrides) {
  HERD_ASSIGN_OR_RETURN(TrainConfig cfg, read_config(path, overrides));
  HERD_RETURN_IF_ERROR(validate(cfg));
  return cfg;
}

Json to_json(const TrainConfig& cfg) {
  Json j = Json::object();
  for (const Field& f : registry()) {
    const std::size_t dot = f.key.find('.');
    j[f.key.substr(0, dot)][f.key.substr(dot + 1)] = f.get(cfg);
  }
  return j;
}

}  // namespace herd::train
