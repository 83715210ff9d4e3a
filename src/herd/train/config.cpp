// The field registry behind TrainConfig: one line per field binds its key, its member and its doc.
#include "herd/train/config.h"

#include <cmath>
#include <functional>
#include <type_traits>

#include "herd/model/flops.h"

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
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<std::int64_t>(d);
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

const std::vector<Field>& registry() {
  using C = TrainConfig;
  static const std::vector<Field> fields = {
      bind_field("model.name", &C::model, &ModelSection::name, "preset (tiny, small, llama3-8b, ...) or config.json"),
      bind_field("model.vocab", &C::model, &ModelSection::vocab, "vocabulary size; 0 takes the tokenizer's"),
      bind_field("data.dir", &C::data, &DataSection::dir, "token shards written by herd data"),
      bind_field("data.tokenizer", &C::data, &DataSection::tokenizer, "tokenizer of the shards (for samples)"),
      bind_field("data.seq_len", &C::data, &DataSection::seq_len, "tokens per packed sequence"),
      bind_field("data.seed", &C::data, &DataSection::seed, "document order seed"),
      bind_field("parallel.tp", &C::parallel, &ParallelSection::tp, "tensor-parallel degree"),
      bind_field("parallel.cp", &C::parallel, &ParallelSection::cp, "context-parallel degree"),
      bind_field("parallel.pp", &C::parallel, &ParallelSection::pp, "pipeline-parallel degree"),
      bind_field("parallel.v", &C::parallel, &ParallelSection::v, "virtual pipeline stages per rank"),
      bind_field("parallel.pp_n", &C::parallel, &ParallelSection::pp_n,
                 "micro-batches per chunk before switching (N); 0 = pp"),
      bind_field("parallel.pp_schedule", &C::parallel, &ParallelSection::pp_schedule,
                 "flexible (Llama 3), interleaved, 1f1b or gpipe"),
      bind_field("parallel.dp", &C::parallel, &ParallelSection::dp, "data-parallel (FSDP) degree"),
      bind_field("parallel.sequence_parallel", &C::parallel, &ParallelSection::sequence_parallel,
                 "sequence parallelism inside TP groups"),
      bind_field("parallel.backend", &C::parallel, &ParallelSection::backend, "local, mpi or auto (mpi iff mpirun)"),
      bind_field("parallel.comm_timeout_s", &C::parallel, &ParallelSection::comm_timeout_s,
                 "seconds a collective may wait before the job stops"),
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
      bind_field("train.micro_batch", &C::train, &TrainSection::micro_batch, "sequences per micro-batch"),
      bind_field("train.grad_accum", &C::train, &TrainSection::grad_accum, "micro-batches per step"),
      bind_field("train.recompute", &C::train, &TrainSection::recompute, "activation recompute: none, selective, full"),
      bind_field("train.threads", &C::train, &TrainSection::threads, "BLAS threads; 0 keeps the default"),
      bind_field("train.seed", &C::train, &TrainSection::seed, "weight initialisation seed"),
      bind_field("train.log_every", &C::train, &TrainSection::log_every, "progress line period in steps"),
      bind_field("train.metrics_file", &C::train, &TrainSection::metrics_file, "JSON-lines metrics; empty: none"),
      bind_field("train.projection_file", &C::train, &TrainSection::projection_file,
                 "JSON of planned vs measured step time and memory (docs/projection.md); empty: none"),
      bind_field("train.peak_gflops_per_core", &C::train, &TrainSection::peak_gflops_per_core, "fp32 peak for MFU"),
      bind_field("eval.every", &C::eval, &EvalSection::every, "steps between evaluations; 0: at the end only"),
      bind_field("eval.batches", &C::eval, &EvalSection::batches, "micro-batches per evaluation"),
      bind_field("checkpoint.dir", &C::checkpoint, &CheckpointSection::dir, "checkpoint directory; empty: none"),
      bind_field("checkpoint.every", &C::checkpoint, &CheckpointSection::every, "steps between checkpoints"),
      bind_field("checkpoint.keep", &C::checkpoint, &CheckpointSection::keep, "newest checkpoints kept"),
      bind_field("checkpoint.resume", &C::checkpoint, &CheckpointSection::resume, "resume from the newest in dir"),
      bind_field("checkpoint.fallback", &C::checkpoint, &CheckpointSection::fallback,
                 "on a corrupt newest checkpoint, use the previous good one"),
      bind_field("generate.samples", &C::generate, &GenerateSection::samples, "samples printed after training"),
      bind_field("generate.max_tokens", &C::generate, &GenerateSection::max_tokens, "tokens per sample"),
      bind_field("generate.prompt", &C::generate, &GenerateSection::prompt, "prompt of the samples"),
      bind_field("comm.deterministic", &C::comm, &CommSection::deterministic,
                 "fixed rank-order reductions, bit-exact; false: MPI's native collectives"),
      bind_field("comm.dump_dir", &C::comm, &CommSection::dump_dir, "flight-recorder dumps; empty: the temp dir"),
      bind_field("comm.recorder_size", &C::comm, &CommSection::recorder_size, "flight-recorder entries per rank"),
      bind_field("projection.cluster_file", &C::projection, &ProjectionSection::cluster_file,
                 "herd calibrate output to plan with; empty: the local-cpu preset"),
      bind_field("projection.background_jobs", &C::projection, &ProjectionSection::background_jobs,
                 "other jobs on the cores; -1: measured, 0: idle host"),
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

Error unknown_key(const std::string& key, const std::string& source) {
  const std::string section = key.substr(0, key.find('.'));
  const std::string known = keys_of(section);
  if (known.empty()) {
    return make_error(source, "unknown section '", section,
                      "'; sections are model, data, optim, schedule, train, eval, checkpoint, generate, "
                      "parallel, comm, projection");
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
    v = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) v = text;  // reported by the typed setter as "expected a number, got ..."
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
  HERD_RETURN_IF_ERROR(positive(c.train.micro_batch, "train.micro_batch"));
  HERD_RETURN_IF_ERROR(positive(c.train.grad_accum, "train.grad_accum"));
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
  if (c.schedule.ramp && c.train.micro_batch % 2 != 0) {
    return make_error("train.micro_batch (", c.train.micro_batch,
                      ") must be even with schedule.ramp (the first stages run half the sequences)");
  }
  if (c.schedule.ramp && c.data.seq_len % 2 != 0) {
    return make_error("data.seq_len (", c.data.seq_len, ") must be even with schedule.ramp");
  }
  HERD_RETURN_IF_ERROR(positive(c.parallel.tp, "parallel.tp"));
  HERD_RETURN_IF_ERROR(positive(c.parallel.cp, "parallel.cp"));
  HERD_RETURN_IF_ERROR(positive(c.parallel.pp, "parallel.pp"));
  HERD_RETURN_IF_ERROR(positive(c.parallel.v, "parallel.v"));
  if (c.parallel.pp_n < 0) return make_error("parallel.pp_n: must be >= 0 (0 = pp), got ", c.parallel.pp_n);
  HERD_RETURN_IF_ERROR(positive(c.parallel.dp, "parallel.dp"));
  if (c.parallel.backend != "auto" && c.parallel.backend != "local" && c.parallel.backend != "mpi") {
    return make_error("parallel.backend: '", c.parallel.backend, "' is unknown; use local, mpi or auto");
  }
  if (!(c.parallel.comm_timeout_s > 0)) {
    return make_error("parallel.comm_timeout_s: must be positive, got ", c.parallel.comm_timeout_s);
  }
  if (c.train.threads < 0) return make_error("train.threads: must be >= 0, got ", c.train.threads);
  if (!(c.train.peak_gflops_per_core > 0)) {
    return make_error("train.peak_gflops_per_core: must be positive, got ", c.train.peak_gflops_per_core);
  }
  if (c.eval.every < 0) return make_error("eval.every: must be >= 0, got ", c.eval.every);
  if (c.model.vocab < 0) return make_error("model.vocab: must be >= 0, got ", c.model.vocab);
  if (c.generate.samples < 0 || c.generate.max_tokens < 0) {
    return make_error("generate.samples and generate.max_tokens: must be >= 0");
  }
  Result<model::Recompute> r = model::parse_recompute(c.train.recompute);
  if (!r.ok()) return r.error().with_context("train.recompute");
  HERD_RETURN_IF_ERROR(positive(c.comm.recorder_size, "comm.recorder_size"));
  if (c.projection.background_jobs < 0 && c.projection.background_jobs != -1) {
    return make_error("projection.background_jobs: must be >= 0, or -1 to measure, got ", c.projection.background_jobs);
  }
  return Status::Ok();
}

Result<TrainConfig> load_config(const std::string& path, const std::vector<std::string>& overrides) {
  TrainConfig cfg;
  if (!path.empty()) {
    HERD_ASSIGN_OR_RETURN(Json j, read_json_file(path));
    HERD_RETURN_IF_ERROR(apply_json(cfg, j, path));
  }
  for (const std::string& o : overrides) HERD_RETURN_IF_ERROR(apply_override(cfg, o));
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

comm::CommOptions comm_options(const TrainConfig& cfg) {
  comm::CommOptions o;
  o.timeout_s = cfg.parallel.comm_timeout_s;
  o.deterministic = cfg.comm.deterministic;
  o.dump_dir = cfg.comm.dump_dir;
  o.recorder_capacity = static_cast<std::size_t>(cfg.comm.recorder_size);
  return o;
}

}  // namespace herd::train
