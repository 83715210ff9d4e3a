// Trainer: the step loop of one rank, evaluation and the batch ramp, the same for every
// layout; its checkpoints and resume are trainer_checkpoints.cpp.
#include "herd/train/step/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "herd/core/cores.h"
#include "herd/core/json_text.h"
#include "herd/core/log.h"
#include "herd/core/timer.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/scratch.h"
#include "herd/measure/timing.h"
#include "herd/model/flops.h"
#include "herd/model/weights.h"
#include "herd/parallel/rank_model.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/checkpoint/interop.h"
#include "herd/train/job/job.h"
#include "herd/train/job/preempt.h"
#include "herd/train/plan/projection.h"
#include "herd/train/step/micro_batch_data.h"

namespace herd::train {

Result<model::LlamaConfig> resolve_model_config(const TrainConfig& cfg, std::int64_t data_vocab) {
  HERD_ASSIGN_OR_RETURN(model::LlamaConfig m, model::resolve_model(cfg.model.name));
  if (cfg.model.vocab > 0) m.vocab = cfg.model.vocab;
  if (data_vocab > m.vocab) {
    return make_error("model.vocab (", m.vocab, ") is smaller than the data's vocabulary (", data_vocab,
                      "); set --model.vocab=", data_vocab, " or use shards made with a smaller tokenizer");
  }
  if (cfg.data.seq_len > m.max_seq_len) {
    return make_error("data.seq_len (", cfg.data.seq_len, ") is longer than model '", m.name, "' allows (",
                      m.max_seq_len, "); set --data.seq_len=", m.max_seq_len, " or less");
  }
  HERD_RETURN_IF_ERROR(model::validate(m));
  return m;
}

double unigram_entropy(const data::TokenDocuments& docs) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(std::max<std::int64_t>(docs.vocab_size, 1)), 0);
  for (std::int32_t t : docs.tokens) {
    if (t >= 0 && t < docs.vocab_size) ++counts[static_cast<std::size_t>(t)];
  }
  const double n = static_cast<double>(docs.tokens.size());
  double h = 0;
  for (std::int64_t c : counts) {
    if (c > 0) h -= static_cast<double>(c) / n * std::log(static_cast<double>(c) / n);
  }
  return h;
}

template <typename T>
Result<std::unique_ptr<Trainer<T>>> Trainer<T>::make(const TrainConfig& cfg, const ResolvedLayout& layout,
                                                     const model::LlamaConfig& model_cfg,
                                                     const parallel::ParallelContext& ctx,
                                                     std::unique_ptr<parallel::RankModel<T>> model,
                                                     std::shared_ptr<const data::TokenDocuments> train_docs,
                                                     std::shared_ptr<const data::TokenDocuments> val_docs) {
  if (!train_docs || train_docs->n_tokens() == 0) return make_error("data.dir: the training split has no tokens");
  std::unique_ptr<Trainer> t(new Trainer());
  t->cfg_ = cfg;
  t->layout_ = layout;
  t->model_cfg_ = model_cfg;
  t->ctx_ = ctx;
  t->model_ = std::move(model);
  t->train_docs_ = std::move(train_docs);
  if (val_docs && val_docs->n_tokens() > 0) t->val_docs_ = std::move(val_docs);
  t->model_->init_weights(static_cast<std::uint64_t>(cfg.train.seed));
  if (!cfg.init.from.empty()) HERD_RETURN_IF_ERROR(load_initial_weights<T>(cfg.init.from, model_cfg, *t->model_));

  t->lr_.peak = cfg.optim.lr;
  t->lr_.min_ratio = cfg.optim.min_lr_ratio;
  t->lr_.warmup = cfg.schedule.warmup_steps;
  t->lr_.decay = cfg.schedule.decay_steps > 0 ? cfg.schedule.decay_steps
                                              : std::max<std::int64_t>(1, cfg.train.steps - cfg.schedule.warmup_steps);
  const std::int64_t run_tokens = cfg.train.steps * cfg.train.global_batch * cfg.data.seq_len;
  t->ramp_ = {cfg.schedule.ramp, t->layout_.layout.microbatch, cfg.data.seq_len,
              cfg.schedule.ramp_tokens > 0 ? cfg.schedule.ramp_tokens : run_tokens / 10,
              cfg.schedule.ramp_tokens2 > 0 ? cfg.schedule.ramp_tokens2 : run_tokens * 3 / 10};

  HERD_ASSIGN_OR_RETURN(t->flops_per_token_, model::train_model_flops_per_token(model_cfg, cfg.data.seq_len,
                                                                                model::AttentionMask::causal()));
  if (t->val_docs_) t->unigram_entropy_ = unigram_entropy(*t->val_docs_);
  // The peak of the cores the job's ranks use on this host (ranks x kernel threads, at most the cores).
  const double cores = usable_cores();
  const double threads = static_cast<double>(kernels::num_threads()) * static_cast<double>(ctx.dims.world());
  t->peak_flops_ = peak_flops_per_core(cfg) * std::min(cores, threads);
  // On a GPU: its peak, once per GPU (ranks as threads share one; one process per GPU otherwise).
  if (ctx.device != kernels::Device::kCpu) {
    const bool threads_share_gpu = std::string(ctx.world->backend()) == "local";
    t->peak_flops_ = device_peak_flops(cfg) * (threads_share_gpu ? 1.0 : static_cast<double>(ctx.dims.world()));
  }

  if (!cfg.checkpoint.dir.empty()) {
    // Before any save: the directory must take writes (a one-line error now, not at the first save), the
    // job must own it (checkpoint_lock.h: no other job saves, prunes or resumes there while this one
    // runs), and rank 0 removes what killed or failed saves left (no rank saves before the first step's
    // collectives).
    if (ctx.rank == 0) {
      Status w = check_checkpoint_dir(cfg.checkpoint.dir);
      if (w.ok()) {
        Result<CheckpointDirLock> lock = CheckpointDirLock::acquire(cfg.checkpoint.dir, "herd train");
        if (lock.ok()) {
          t->dir_lock_ = std::move(*lock);
        } else {
          w = lock.error();
        }
      }
      const int stale = w.ok() ? remove_stale_tmp(cfg.checkpoint.dir) : 0;
      if (stale > 0) log_info("checkpoint.dir: removed ", stale, " unfinished save(s) (.tmp-step_*)");
      int ok = w.ok() ? 1 : 0;
      HERD_RETURN_IF_ERROR(ctx.world->broadcast(&ok, 1, DType::kI32, 0));
      HERD_RETURN_IF_ERROR(w);
    } else {
      int ok = 0;
      HERD_RETURN_IF_ERROR(ctx.world->broadcast(&ok, 1, DType::kI32, 0));
      if (!ok) return make_error("checkpoint.dir '", cfg.checkpoint.dir, "' is not usable (rank 0 says why)");
    }
    CheckpointWriter::Options wo;
    wo.dir = cfg.checkpoint.dir;
    wo.rank = ctx.rank;
    wo.world_size = ctx.dims.world();
    wo.keep = cfg.checkpoint.keep;
    wo.timeout_s = cfg.parallel.comm_timeout_s;
    wo.async = cfg.checkpoint.async;
    t->writer_ = std::make_unique<CheckpointWriter>(wo);
    if (cfg.checkpoint.resume) HERD_RETURN_IF_ERROR(t->resume());
  }
  HERD_ASSIGN_OR_RETURN(t->current_, t->loader_for(t->ramp_.at(t->tokens_)));
  HERD_ASSIGN_OR_RETURN(t->stragglers_, StragglerMonitor::make(cfg.diagnostics, ctx));
  if (!cfg.train.metrics_file.empty() && ctx.rank == 0) {
    HERD_ASSIGN_OR_RETURN(t->metrics_, MetricsWriter::open(cfg.train.metrics_file, t->resumed_from_));
    t->redone_until_ = t->metrics_.redone_until();
  }
  return t;
}

template <typename T>
Result<data::Loader*> Trainer<T>::loader_for(const BatchShape& shape) {
  const std::int64_t rows = layout_.layout.dp * shape.micro_batch;  // one global micro-batch
  for (auto& l : loaders_) {
    if (l->config().seq_len == shape.seq_len && l->config().batch_size == rows) return l.get();
  }
  data::LoaderConfig lc;
  lc.seq_len = shape.seq_len;
  lc.batch_size = rows;
  lc.seed = static_cast<std::uint64_t>(cfg_.data.seed);
  lc.max_seq_len = model_cfg_.max_seq_len;
  lc.vocab_size = model_cfg_.vocab;
  HERD_ASSIGN_OR_RETURN(data::Loader l, data::Loader::make(train_docs_, lc));
  loaders_.push_back(std::make_unique<data::Loader>(std::move(l)));
  // A new shape continues the token stream where the previous shape stopped.
  if (current_) HERD_RETURN_IF_ERROR(loaders_.back()->restore(current_->state()));
  return loaders_.back().get();
}

template <typename T>
Result<bool> Trainer<T>::next_slices(data::Loader& loader, StepSlices& out) {
  out.data.clear();
  out.views.clear();
  out.real = 0;
  out.tokens = 0;
  bool any = false;
  for (std::int64_t k = 0; k < layout_.microbatches; ++k) {
    std::optional<data::Batch> b = loader.next();
    if (b) any = true;
    const data::Batch g = b ? std::move(*b) : data::Batch::padding(loader.config().batch_size, loader.config().seq_len);
    out.real += g.n_targets();
    out.tokens += g.rows * g.seq_len;
    HERD_ASSIGN_OR_RETURN(data::Batch s, data::slice_batch(g, ctx_.dims, ctx_.rank));
    out.data.emplace_back(std::move(s));
  }
  for (const MicroBatchData& d : out.data) out.views.push_back(d.view());
  return any;
}

template <typename T>
Result<kernels::CrossEntropyLoss> Trainer<T>::reduce_loss(const kernels::CrossEntropyLoss& local, std::int64_t real) {
  double sums[2] = {local.loss_sum, static_cast<double>(local.count)};
  // Every DP (and CP) slice once; TP ranks of a slice agree, so the DP group alone sums the whole.
  HERD_RETURN_IF_ERROR(ctx_.dp->all_reduce(sums, 2, comm::ReduceOp::kSum));
  if (ctx_.cp != nullptr && ctx_.cp->size() > 1)
    HERD_RETURN_IF_ERROR(ctx_.cp->all_reduce(sums, 2, comm::ReduceOp::kSum));
  if (static_cast<std::int64_t>(sums[1]) != real) {
    return make_error("step ", step_ + 1, ": the ranks' slices hold ", static_cast<std::int64_t>(sums[1]),
                      " real tokens but the global batch has ", real, "; the batch slicing is wrong");
  }
  return kernels::CrossEntropyLoss{sums[0], real};
}

template <typename T>
Result<double> Trainer<T>::evaluate() {
  if (!val_docs_) return std::nan("");
  data::LoaderConfig lc;
  lc.seq_len = cfg_.data.seq_len;
  lc.batch_size = layout_.layout.dp * layout_.layout.microbatch;
  lc.shuffle = false;
  lc.loop = false;
  lc.max_seq_len = model_cfg_.max_seq_len;
  lc.vocab_size = model_cfg_.vocab;
  HERD_ASSIGN_OR_RETURN(data::Loader loader, data::Loader::make(val_docs_, lc));
  double sum = 0;
  std::int64_t count = 0;
  StepSlices step;
  for (std::int64_t i = 0; i < cfg_.eval.batches; ++i) {
    HERD_ASSIGN_OR_RETURN(bool any, next_slices(loader, step));
    if (!any) break;
    HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss r, model_->evaluate_step(step.views));
    HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss g, reduce_loss(r, step.real));
    sum += g.loss_sum;
    count += g.count;
  }
  return count > 0 ? sum / static_cast<double>(count) : std::nan("");
}

template <typename T>
Status Trainer<T>::skip_nonfinite_step(double loss_value, StepRecord& rec) {
  // The NaN guard: nothing of this step is applied (weights, moments and the optimizer's step count
  // stay), the same decision on every rank.
  HERD_ASSIGN_OR_RETURN(rec.nonfinite, locate_nonfinite(loss_value, rec.grad_norm));
  ++nonfinite_run_;
  const std::string what = "step " + std::to_string(step_ + 1) + ": non-finite loss (" + std::to_string(loss_value) +
                           ") or gradient norm (" + std::to_string(rec.grad_norm) + "), non-finite values in " +
                           rec.nonfinite;
  if (cfg_.train.nonfinite == "stop" || nonfinite_run_ > cfg_.train.max_nonfinite_skips) {
    HERD_RETURN_IF_ERROR(finish_checkpoints());  // an earlier, finite save in flight still completes
    return make_error(what, cfg_.train.nonfinite == "stop"
                                ? "; train.nonfinite=stop ends the job (nothing of this step is saved)"
                                : "; more than train.max_nonfinite_skips (" +
                                      std::to_string(cfg_.train.max_nonfinite_skips) +
                                      ") steps in a row; lower optim.lr or raise optim.grad_clip");
  }
  if (ctx_.rank == 0) {
    log_warning(what, "; the step is skipped (", nonfinite_run_, " in a row, at most ", cfg_.train.max_nonfinite_skips,
                ", train.max_nonfinite_skips)");
  }
  rec.skipped = true;
  return Status::Ok();
}

template <typename T>
void Trainer<T>::write_metrics(const StepRecord& rec, double elapsed_s, double step_s) {
  if (!metrics_.enabled()) return;
  Json j = {{"step", rec.step},
            {"loss", rec.loss},
            {"lr", rec.lr},
            {"tokens", rec.tokens},
            {"tokens_per_s", rec.tokens_per_s},
            {"grad_norm", rec.grad_norm},
            {"mfu", rec.mfu},
            {"elapsed_s", elapsed_s},
            {"step_s", step_s},
            {"time", unix_time()},
            {"layout", ctx_.dims.to_string()},
            {"ranks", ctx_.dims.world()}};
  // JSON has no NaN or Inf: a non-finite number is written as null, and the record says why.
  for (const char* k : {"loss", "grad_norm", "tokens_per_s", "mfu"}) {
    if (!std::isfinite(j[k].get<double>())) j[k] = nullptr;
  }
  if (rec.skipped) {
    j["skipped"] = true;
    j["nonfinite"] = rec.nonfinite;
  }
  if (rec.checkpoint_s >= 0) j["checkpoint_s"] = rec.checkpoint_s;
  if (rec.step <= redone_until_) j["redone"] = true;
  if (rec.straggler_check) {
    Json list = Json::array();
    for (const comm::Straggler& s : rec.stragglers) list.push_back(comm::straggler_json(s));
    j["stragglers"] = std::move(list);
  }
  if (rec.val_loss) j["val_loss"] = *rec.val_loss;
  if ((rec.step == 1 || rec.val_loss) && val_docs_) j["unigram_entropy"] = unigram_entropy_;
  if (Status s = metrics_.write(j); !s.ok() && metrics_error_.ok()) metrics_error_ = s;
}

template <typename T>
void Trainer<T>::log_progress(const StepRecord& rec, double avg_tokens_per_s, std::int64_t step_tokens) const {
  const double eta =
      static_cast<double>(cfg_.train.steps - rec.step) * static_cast<double>(step_tokens) / avg_tokens_per_s;
  std::string line = progress_line(rec.step, cfg_.train.steps, rec.loss, rec.lr, avg_tokens_per_s,
                                   avg_tokens_per_s * flops_per_token_ / peak_flops_, eta);
  if (rec.val_loss) line += " | val " + std::to_string(*rec.val_loss).substr(0, 6);
  if (ctx_.dims.world() > 1) line += " | " + ctx_.dims.to_string();
  log_info(line + stragglers_.progress_suffix());
}

template <typename T>
Result<parallel::RankMemoryUse> Trainer<T>::busiest_rank_memory() {
  parallel::RankMemoryUse mine = model_->memory_use();
  mine.kernel_scratch_bytes = static_cast<double>(kernels::this_thread_scratch_bytes());
  mine.device_peak_bytes = ctx_.ops().peak_allocated_bytes();
  const int world = ctx_.world->size();
  if (world == 1) return mine;
  const double send[4] = {mine.state_bytes, mine.arena_peak_bytes, mine.saved_activation_bytes,
                          mine.kernel_scratch_bytes};
  std::vector<double> all(4 * static_cast<std::size_t>(world));
  HERD_RETURN_IF_ERROR(ctx_.world->all_gather(send, all.data(), 4, DType::kF64));
  parallel::RankMemoryUse busiest;
  busiest.device_peak_bytes = mine.device_peak_bytes;
  for (int r = 0; r < world; ++r) {
    const double* v = all.data() + 4 * r;
    parallel::RankMemoryUse m;
    m.state_bytes = v[0], m.arena_peak_bytes = v[1], m.saved_activation_bytes = v[2], m.kernel_scratch_bytes = v[3];
    m.device_peak_bytes = busiest.device_peak_bytes;
    if (r == 0 || m.total() > busiest.total()) busiest = m;
  }
  return busiest;
}

template <typename T>
Result<typename Trainer<T>::StepOutcome> Trainer<T>::train_step(const kernels::AdamWConfig& ac, StepSlices& step,
                                                                StepClock& clock) {
  StepOutcome out;
  HERD_ASSIGN_OR_RETURN(data::Loader * next, loader_for(ramp_.at(tokens_)));
  if (next != current_) {
    HERD_RETURN_IF_ERROR(next->restore(current_->state()));
    current_ = next;
  }
  HERD_ASSIGN_OR_RETURN(bool any, next_slices(*current_, step));
  HERD_CHECK(any, "a looping loader ran out of batches");
  const std::int64_t real = step.real;
  out.tokens = step.tokens;
  model_->zero_grads();
  const T scale = real > 0 ? T(1) / static_cast<T>(real) : T(0);
  HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss local, model_->forward_backward_step(step.views, scale));
  HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss loss, reduce_loss(local, real));
  const double lr = lr_.at(step_);
  StepRecord& rec = out.rec;
  const double loss_value = real > 0 ? loss.loss_sum / static_cast<double>(real) : 0.0;
  if (hooks) hooks->after_backward(step_ + 1, *model_);
  HERD_ASSIGN_OR_RETURN(rec.grad_norm, model_->grad_norm());
  if (writer_) note_checkpoint_outcome(writer_->poll());
  HERD_ASSIGN_OR_RETURN(out.ctl, agree_step(!std::isfinite(loss_value) || !std::isfinite(rec.grad_norm)));
  const StepControl& ctl = out.ctl;
  if (ctl.metrics_failed) {
    // Rank 0 could not write the previous step's record: every rank ends here, rank 0 with the reason.
    if (!metrics_error_.ok()) return metrics_error_.error();
    return make_error("rank 0 could not write train.metrics_file '", cfg_.train.metrics_file, "'; the job ends");
  }
  if (ctl.nonfinite) {
    HERD_RETURN_IF_ERROR(skip_nonfinite_step(loss_value, rec));
  } else {
    nonfinite_run_ = 0;
    const Timer update;
    model_->apply_update(ac, lr, cfg_.optim.grad_clip, rec.grad_norm);
    rec.optimizer_s = update.seconds();
  }
  if (ctl.checkpoint_failed) HERD_RETURN_IF_ERROR(checkpoint_failed(": training on, the next save retries"));
  ++step_;
  tokens_ += out.tokens;
  if (hooks) hooks->after_update(step_, clock);  // inside the step's time
  rec.step = step_;
  rec.loss = loss_value;
  rec.lr = lr;
  rec.tokens = tokens_;
  return out;
}

template <typename T>
Status Trainer<T>::run(std::int64_t stop_after) {
  kernels::AdamWConfig ac;
  ac.beta1 = cfg_.optim.beta1;
  ac.beta2 = cfg_.optim.beta2;
  ac.eps = cfg_.optim.eps;
  ac.weight_decay = cfg_.optim.weight_decay;
  const std::int64_t steps = cfg_.train.steps;
  const bool lead = ctx_.rank == 0;
  Timer wall;
  const std::int64_t tokens_at_start = tokens_;
  // Ranks that are threads of this process sleep while they wait; rank 0 probes the host's speed for the
  // projection (projection.speed_probe) while the others wait at a barrier rather than compute beside it.
  const bool thread_ranks = std::string(ctx_.world->backend()) == "local";
  const Result<Projection> plan = plan_run(cfg_, model_cfg_, !quiet && lead, thread_ranks);
  if (thread_ranks && cfg_.projection.speed_probe && ctx_.world->size() > 1) {
    HERD_RETURN_IF_ERROR(ctx_.world->barrier());
  }
  StepSlices step;
  const std::unique_ptr<StepClock> unrecorded = step_clock ? nullptr : measured_step_clock(nullptr);
  StepClock& clock = step_clock ? *step_clock : *unrecorded;
  while (step_ < steps) {
    if (heartbeat) heartbeat("step " + std::to_string(step_ + 1));
    if (hooks) HERD_RETURN_IF_ERROR(hooks->before_step(step_ + 1));
    Timer step_timer;
    clock.start_step();  // the step's split for the straggler watch (straggler_monitor.h)
    const std::optional<std::array<double, measure::kGroupKinds>> comm_at_start =
        comm_by_kind ? std::optional(comm_by_kind()) : std::nullopt;
    HERD_ASSIGN_OR_RETURN(StepOutcome done, train_step(ac, step, clock));
    StepRecord& rec = done.rec;
    if (comm_at_start) {
      std::array<double, measure::kGroupKinds> now = comm_by_kind();
      for (int k = 0; k < measure::kGroupKinds; ++k) now[k] -= (*comm_at_start)[k];
      rec.comm_by_kind_s = now;
    }
    const StepControl& ctl = done.ctl;
    if (step_clock) {
      // Every collective of the step counts, the control all-reduce included.
      const comm::FlightRecorder::StepTimes split = clock.split(step_);
      rec.comm_wait_s = split.wait_s;
      stragglers_.add_step(split);
      if (recorder) recorder->note_step(split);
    }
    const double dt = step_timer.seconds();
    step_seconds_total += dt;
    rec.step_s = dt;
    rec.straggler_check = ctl.straggler_check;
    rec.stragglers = ctl.stragglers;
    if (lead && !quiet && ctl.straggler_check) {
      for (const std::string& n : stragglers_.news()) log_warning(n);
    }
    const bool last = step_ == steps || step_ == stop_after;
    if (writer_ && (step_ % cfg_.checkpoint.every == 0 || last || ctl.stop)) {
      HERD_ASSIGN_OR_RETURN(rec.checkpoint_s, start_checkpoint());
    }
    if (writer_ && (last || ctl.stop)) {
      Timer wait;
      HERD_RETURN_IF_ERROR(finish_checkpoints());
      rec.checkpoint_s += wait.seconds();
    }
    rec.tokens_per_s = static_cast<double>(done.tokens) / dt;
    rec.mfu = rec.tokens_per_s * flops_per_token_ / peak_flops_;
    if ((cfg_.eval.every > 0 && step_ % cfg_.eval.every == 0) || step_ == steps) {
      HERD_ASSIGN_OR_RETURN(double v, evaluate());
      if (!std::isnan(v)) rec.val_loss = v;
    }
    history_.push_back(rec);
    write_metrics(rec, wall.seconds(), dt);
    if (!quiet && lead && (step_ % cfg_.train.log_every == 0 || last || rec.val_loss)) {
      log_progress(rec, static_cast<double>(tokens_ - tokens_at_start) / wall.seconds(), done.tokens);
    }
    if (ctl.stop) {
      preempted_ = true;
      if (lead) {
        log_warning("preempted: stopped after step ", step_,
                    writer_ ? " with a checkpoint" : " (no checkpoint.dir, nothing saved)", "; exit code ",
                    preemption_exit_code());
      }
      break;
    }
    if (cfg_.diagnostics.dump_every > 0 && step_ % cfg_.diagnostics.dump_every == 0) {
      dump_recorder("diagnostics.dump_every: step " + std::to_string(step_));
    }
    if (step_ == stop_after) break;
  }
  HERD_ASSIGN_OR_RETURN(const parallel::RankMemoryUse memory, busiest_rank_memory());
  // The last step's record, which no later step boundary agreed on: rank 0 alone reports it.
  if (!metrics_error_.ok()) return metrics_error_;
  report_run(plan, cfg_, history_, memory, !quiet && lead);
  if (!quiet && lead && stragglers_.enabled()) log_info(stragglers_.summary());
  return Status::Ok();
}

template <typename T>
Result<typename Trainer<T>::StepControl> Trainer<T>::agree_step(bool nonfinite_here) {
  // control_ keeps its capacity across steps: the common step allocates nothing.
  std::vector<double>& v = control_;
  v.assign({preemption_requested() ? 1.0 : 0.0, nonfinite_here ? 1.0 : 0.0, checkpoint_failed_here_ ? 1.0 : 0.0,
            metrics_error_.ok() ? 0.0 : 1.0});
  StepControl c;
  c.straggler_check = stragglers_.due(step_ + 1);
  if (c.straggler_check) {
    const std::vector<double> mine = stragglers_.slots();
    v.insert(v.end(), mine.begin(), mine.end());
  }
  HERD_RETURN_IF_ERROR(ctx_.world->all_reduce(v.data(), v.size(), DType::kF64, comm::ReduceOp::kMax));
  c.stop = v[0] > 0;
  c.nonfinite = v[1] > 0;
  c.checkpoint_failed = v[2] > 0;
  c.metrics_failed = v[3] > 0;
  if (c.straggler_check) c.stragglers = stragglers_.observe(v.data() + 4, step_ + 1);
  return c;
}

template <typename T>
void Trainer<T>::dump_recorder(const std::string& reason) {
  if (!recorder) return;
  const comm::CommOptions o = comm_options(cfg_);
  Result<std::string> path =
      recorder->dump(o.dump_dir, o.job_id.empty() ? std::to_string(::getpid()) : o.job_id, reason);
  if (!path.ok()) log_warning(path.error().message());
}

template <typename T>
Result<std::string> Trainer<T>::locate_nonfinite(double loss, double norm) {
  constexpr std::size_t kGroups = std::size(model::kWeightGroups);
  double flags[kGroups] = {};
  for (const parallel::ShardPiece<T>& p : model_->shard_pieces()) {
    if (p.g == nullptr) continue;
    const char* g = model::weight_group(p.name);
    std::size_t k = 0;
    while (k + 1 < kGroups && std::string(model::kWeightGroups[k]) != g) ++k;
    if (flags[k] > 0) continue;
    for (std::int64_t i = 0; i < p.count(); ++i) {
      if (!std::isfinite(p.g[i])) {
        flags[k] = 1;
        break;
      }
    }
  }
  HERD_RETURN_IF_ERROR(ctx_.world->all_reduce(flags, kGroups, DType::kF64, comm::ReduceOp::kMax));
  std::string out;
  for (std::size_t k = 0; k < kGroups; ++k) {
    if (flags[k] > 0) out += (out.empty() ? "" : ",") + std::string(model::kWeightGroups[k]);
  }
  if (out.empty()) out = std::isfinite(loss) && std::isfinite(norm) ? "unknown" : "loss";
  return out;
}

template class Trainer<float>;
template class Trainer<double>;

}  // namespace herd::train
