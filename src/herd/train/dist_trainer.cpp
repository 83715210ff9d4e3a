// DistTrainer: the step loop of one rank, layout checks, fault injection, distributed checkpoints.
#include "herd/train/dist_trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "herd/core/log.h"
#include "herd/core/timer.h"
#include "herd/train/dist_checkpoint.h"
#include "herd/train/micro_batch_data.h"
#include "herd/train/pipeline_model.h"
#include "herd/train/projection.h"

namespace herd::train {

Status check_layout(const TrainConfig& cfg, const model::LlamaConfig& m, std::int64_t world_size) {
  const std::int64_t tp = cfg.parallel.tp, dp = cfg.parallel.dp, cp = cfg.parallel.cp;
  if (m.n_heads % tp != 0) {
    return make_error("parallel.tp (", tp, ") must divide the model's ", m.n_heads,
                      " attention heads; choose a divisor");
  }
  if (m.n_kv_heads % tp != 0) {
    return make_error("parallel.tp (", tp, ") must divide the model's ", m.n_kv_heads,
                      " KV heads; choose a divisor of ", m.n_kv_heads);
  }
  if (m.vocab % tp != 0) {
    return make_error("parallel.tp (", tp, ") must divide the vocabulary (", m.vocab,
                      "); set model.vocab to a multiple");
  }
  if (m.ffn_hidden % tp != 0) {
    return make_error("parallel.tp (", tp, ") must divide the FFN width (", m.ffn_hidden, ")");
  }
  if (cfg.train.micro_batch % dp != 0) {
    return make_error("parallel.dp (", dp, ") must divide train.micro_batch (", cfg.train.micro_batch,
                      "), the global sequences per micro-batch; set train.micro_batch to a multiple of ", dp);
  }
  if (cfg.data.seq_len % (2 * cp) != 0) {
    return make_error("data.seq_len (", cfg.data.seq_len, ") is not divisible by 2 x parallel.cp (", 2 * cp,
                      "): context parallelism cuts each sequence into 2 x cp chunks; use a multiple of ", 2 * cp);
  }
  if (cfg.parallel.sequence_parallel && tp > 1 && (cfg.data.seq_len / cp) % tp != 0) {
    if (cp > 1) {
      return make_error("parallel.tp (", tp, ") must divide the CP-local sequence data.seq_len / parallel.cp (",
                        cfg.data.seq_len, " / ", cp, " = ", cfg.data.seq_len / cp,
                        ") with sequence parallelism; use a data.seq_len that is a multiple of ", 2 * cp * tp,
                        " or set parallel.sequence_parallel=false");
    }
    return make_error("parallel.tp (", tp, ") must divide data.seq_len (", cfg.data.seq_len,
                      ") with sequence parallelism; change data.seq_len or set parallel.sequence_parallel=false");
  }
  const std::int64_t world = cfg.parallel.world();
  if (world_size > 0 && world != world_size) {
    return make_error("parallel.tp (", tp, ") x parallel.cp (", cp, ") x parallel.pp (", cfg.parallel.pp,
                      ") x parallel.dp (", dp, ") = ", world, " ranks, but the job has ", world_size,
                      "; make the product ", world_size);
  }
  HERD_RETURN_IF_ERROR(check_pipeline(cfg, m));
  if (cfg.schedule.ramp && world > 1) {
    return make_error("schedule.ramp is not supported with more than one rank; set schedule.ramp=false");
  }
  return Status::Ok();
}

Result<FaultSpec> FaultSpec::from_env() {
  FaultSpec f;
  const char* e = std::getenv("HERD_FAULT");
  if (e == nullptr || *e == '\0') return f;
  const std::string s = e;
  std::istringstream in(s);
  std::string kind, rank, step, secs;
  std::getline(in, kind, ':');
  std::getline(in, rank, ':');
  std::getline(in, step, ':');
  std::getline(in, secs, ':');
  try {
    f.rank = std::stoi(rank);
    f.step = std::stoll(step);
    if (kind == "stall") {
      f.kind = Kind::kStall;
      f.seconds = std::stod(secs);
    } else if (kind == "exit") {
      f.kind = Kind::kExit;
    } else {
      throw std::invalid_argument(kind);
    }
  } catch (const std::exception&) {
    return make_error("HERD_FAULT: '", s, "' is not stall:RANK:STEP:SECONDS or exit:RANK:STEP");
  }
  return f;
}

template <typename T>
Result<std::unique_ptr<DistTrainer<T>>> DistTrainer<T>::make(const TrainConfig& cfg,
                                                             const model::LlamaConfig& model_cfg,
                                                             const parallel::ParallelContext& ctx,
                                                             std::unique_ptr<RankModel<T>> model,
                                                             std::shared_ptr<const data::TokenDocuments> train_docs) {
  HERD_RETURN_IF_ERROR(validate(cfg));
  HERD_RETURN_IF_ERROR(check_layout(cfg, model_cfg, ctx.dims.world()));
  std::unique_ptr<DistTrainer> t(new DistTrainer());
  t->cfg_ = cfg;
  t->model_cfg_ = model_cfg;
  t->ctx_ = ctx;
  t->model_ = std::move(model);
  t->model_->init_weights(static_cast<std::uint64_t>(cfg.train.seed));
  HERD_ASSIGN_OR_RETURN(t->fault_, FaultSpec::from_env());
  t->lr_.peak = cfg.optim.lr;
  t->lr_.min_ratio = cfg.optim.min_lr_ratio;
  t->lr_.warmup = cfg.schedule.warmup_steps;
  t->lr_.decay = cfg.schedule.decay_steps > 0 ? cfg.schedule.decay_steps
                                              : std::max<std::int64_t>(1, cfg.train.steps - cfg.schedule.warmup_steps);
  data::LoaderConfig lc;
  lc.seq_len = cfg.data.seq_len;
  lc.batch_size = cfg.train.micro_batch;
  lc.seed = static_cast<std::uint64_t>(cfg.data.seed);
  lc.max_seq_len = model_cfg.max_seq_len;
  lc.vocab_size = model_cfg.vocab;
  HERD_ASSIGN_OR_RETURN(data::Loader l, data::Loader::make(std::move(train_docs), lc));
  t->loader_ = std::make_unique<data::Loader>(std::move(l));
  if (!cfg.checkpoint.dir.empty() && cfg.checkpoint.resume) {
    const std::string latest = latest_dist_checkpoint(cfg.checkpoint.dir);
    if (!latest.empty()) HERD_RETURN_IF_ERROR(t->resume(latest));
  }
  if (!cfg.train.metrics_file.empty() && ctx.rank == 0) {
    HERD_ASSIGN_OR_RETURN(t->metrics_, MetricsWriter::open(cfg.train.metrics_file, t->resumed_from_ >= 0));
  }
  return t;
}

template <typename T>
Json DistTrainer<T>::layout_json() const {
  return {{"tp", ctx_.dims.tp()}, {"cp", ctx_.dims.cp()},       {"pp", ctx_.dims.pp()},
          {"dp", ctx_.dims.dp()}, {"world", ctx_.dims.world()}, {"sequence_parallel", ctx_.sequence_parallel}};
}

template <typename T>
Status DistTrainer<T>::run(std::int64_t stop_after) {
  kernels::AdamWConfig ac;
  ac.beta1 = cfg_.optim.beta1;
  ac.beta2 = cfg_.optim.beta2;
  ac.eps = cfg_.optim.eps;
  ac.weight_decay = cfg_.optim.weight_decay;
  const std::int64_t steps = cfg_.train.steps;
  Timer wall;
  const std::int64_t tokens_at_start = tokens_;
  const Result<Projection> plan = plan_run(cfg_, model_cfg_, !quiet && ctx_.rank == 0);
  while (step_ < steps) {
    if (fault_.kind != FaultSpec::Kind::kNone && fault_.rank == ctx_.rank && fault_.step == step_ + 1) {
      if (fault_.kind == FaultSpec::Kind::kExit) {
        log_warning("HERD_FAULT: rank ", ctx_.rank, " exits at step ", step_ + 1);
        if (std::string(ctx_.world->backend()) == "mpi") std::_Exit(3);
        return make_error("rank ", ctx_.rank, " stopped by HERD_FAULT at step ", step_ + 1);
      }
      log_warning("HERD_FAULT: rank ", ctx_.rank, " stalls for ", fault_.seconds, " s at step ", step_ + 1);
      std::this_thread::sleep_for(std::chrono::duration<double>(fault_.seconds));
    }
    Timer step_timer;
    const double wait_at_start = comm_wait_clock ? comm_wait_clock() : 0.0;
    std::vector<MicroBatchData> slices;
    std::int64_t real = 0, step_tokens = 0;
    for (std::int64_t m = 0; m < cfg_.train.grad_accum; ++m) {
      std::optional<data::Batch> b = loader_->next();
      HERD_CHECK(b.has_value(), "a looping loader ran out of batches");
      real += b->n_targets();
      step_tokens += b->rows * b->seq_len;
      HERD_ASSIGN_OR_RETURN(data::Batch s, data::slice_batch(*b, ctx_.dims, ctx_.rank));
      slices.emplace_back(std::move(s));
    }
    model_->zero_grads();
    const T scale = real > 0 ? T(1) / static_cast<T>(real) : T(0);
    std::vector<nn::MicroBatch> views;
    for (const MicroBatchData& s : slices) views.push_back(s.view());
    HERD_ASSIGN_OR_RETURN(kernels::CrossEntropyLoss r, model_->forward_backward_step(views, scale));
    double sums[2] = {r.loss_sum, static_cast<double>(r.count)};  // loss sum, real tokens of this rank's slices
    // Every DP (and CP) slice once; TP ranks of a slice agree, so the DP group alone sums the whole.
    HERD_RETURN_IF_ERROR(ctx_.dp->all_reduce(sums, 2, comm::ReduceOp::kSum));
    if (ctx_.cp != nullptr && ctx_.cp->size() > 1) {
      HERD_RETURN_IF_ERROR(ctx_.cp->all_reduce(sums, 2, comm::ReduceOp::kSum));
    }
    if (static_cast<std::int64_t>(sums[1]) != real) {
      return make_error("step ", step_ + 1, ": the ranks' slices hold ", static_cast<std::int64_t>(sums[1]),
                        " real tokens but the global batch has ", real, "; the batch slicing is wrong");
    }
    const double lr = lr_.at(step_);
    StepRecord rec;
    HERD_ASSIGN_OR_RETURN(rec.grad_norm, model_->step(ac, lr, cfg_.optim.grad_clip));
    ++step_;
    tokens_ += step_tokens;
    const double dt = step_timer.seconds();
    step_seconds_total += dt;
    rec.step = step_;
    rec.loss = real > 0 ? sums[0] / static_cast<double>(real) : 0.0;
    rec.lr = lr;
    rec.tokens = tokens_;
    rec.tokens_per_s = static_cast<double>(step_tokens) / dt;
    if (comm_wait_clock) rec.comm_wait_s = comm_wait_clock() - wait_at_start;
    history_.push_back(rec);
    if (metrics_.enabled()) {
      metrics_.write({{"step", rec.step},
                      {"loss", rec.loss},
                      {"lr", rec.lr},
                      {"tokens", rec.tokens},
                      {"tokens_per_s", rec.tokens_per_s},
                      {"grad_norm", rec.grad_norm},
                      {"layout", ctx_.dims.to_string()}});
    }
    if (on_step) on_step(rec);
    const bool last = step_ == steps || step_ == stop_after;
    if (!quiet && ctx_.rank == 0 && (step_ % cfg_.train.log_every == 0 || last)) {
      const double tps = static_cast<double>(tokens_ - tokens_at_start) / wall.seconds();
      log_info("step ", step_, "/", steps, " | loss ", rec.loss, " | lr ", lr, " | ", static_cast<std::int64_t>(tps),
               " tok/s | ", ctx_.dims.to_string());
    }
    if (!cfg_.checkpoint.dir.empty() && (step_ % cfg_.checkpoint.every == 0 || last)) {
      HERD_RETURN_IF_ERROR(save_checkpoint());
    }
    if (step_ == stop_after) break;
  }
  report_run(plan, cfg_, history_, model_->memory_use(), !quiet && ctx_.rank == 0);
  return Status::Ok();
}

template <typename T>
Status DistTrainer<T>::save_checkpoint() {
  const Json meta = {{"tokens", tokens_},
                     {"optimizer_steps", model_->optimizer_steps()},
                     {"loader", loader_->state().to_json()},
                     {"config", to_json(cfg_)},
                     {"model", model::config_to_hf_json(model_cfg_)}};
  return save_dist_checkpoint<T>(cfg_.checkpoint.dir, step_, meta, layout_json(), *ctx_.world, model_->shard_pieces(),
                                 cfg_.checkpoint.keep);
}

template <typename T>
Status DistTrainer<T>::resume(const std::string& step_path) {
  HERD_ASSIGN_OR_RETURN(DistCheckpoint ck, open_dist_checkpoint(step_path));
  std::vector<ShardPiece<T>> pieces = model_->load_pieces();
  HERD_RETURN_IF_ERROR(ck.load_into<T>(pieces));
  HERD_RETURN_IF_ERROR(model_->after_load());
  const Json& meta = ck.meta();
  if (!meta.contains("loader") || !meta.contains("tokens") || !meta.contains("optimizer_steps")) {
    return make_error(step_path, "/manifest.json: meta lacks loader, tokens or optimizer_steps");
  }
  model_->set_optimizer_steps(meta["optimizer_steps"].get<std::int64_t>());
  step_ = ck.step;
  tokens_ = meta["tokens"].get<std::int64_t>();
  HERD_ASSIGN_OR_RETURN(data::LoaderState st, data::LoaderState::from_json(meta["loader"]));
  Status s = loader_->restore(st);
  if (!s.ok()) return s.error().with_context(step_path);
  resumed_from_ = step_;
  if (!quiet && ctx_.rank == 0) {
    log_info("resumed from ", step_path, " (step ", step_, ", written by layout ", ck.manifest["layout"].dump(), ")");
  }
  return Status::Ok();
}

template class DistTrainer<float>;
template class DistTrainer<double>;

}  // namespace herd::train
