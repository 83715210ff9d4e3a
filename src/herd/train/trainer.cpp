// Trainer: the step loop, evaluation, checkpoint save and exact resume.
#include "herd/train/trainer.h"

#include <cmath>
#include <cstring>

#include "herd/core/log.h"
#include "herd/core/timer.h"
#include "herd/kernels/gemm.h"
#include "herd/model/flops.h"
#include "herd/train/checkpoint.h"
#include "herd/train/micro_batch_data.h"
#include "herd/train/projection.h"

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

Result<std::unique_ptr<Trainer>> Trainer::make(const TrainConfig& cfg, const model::LlamaConfig& model_cfg,
                                               std::shared_ptr<const data::TokenDocuments> train_docs,
                                               std::shared_ptr<const data::TokenDocuments> val_docs) {
  HERD_RETURN_IF_ERROR(validate(cfg));
  HERD_ASSIGN_OR_RETURN(model::Recompute recompute, model::parse_recompute(cfg.train.recompute));
  if (!train_docs || train_docs->n_tokens() == 0) return make_error("data.dir: the training split has no tokens");
  if (!val_docs || val_docs->n_tokens() == 0) {
    return make_error("data.dir: the held-out split has no tokens; run herd data with --val-fraction > 0");
  }
  std::unique_ptr<Trainer> t(new Trainer());
  t->cfg_ = cfg;
  t->model_cfg_ = model_cfg;
  t->train_docs_ = std::move(train_docs);
  t->val_docs_ = std::move(val_docs);
  if (cfg.train.threads > 0) kernels::set_num_threads(static_cast<int>(cfg.train.threads));

  t->model_ = std::make_unique<nn::LlamaModel<float>>(model_cfg, recompute, cfg.train.micro_batch, cfg.data.seq_len);
  t->model_->init_weights(static_cast<std::uint64_t>(cfg.train.seed));
  t->opt_ = std::make_unique<AdamW<float>>(t->model_->param_count());

  t->lr_.peak = cfg.optim.lr;
  t->lr_.min_ratio = cfg.optim.min_lr_ratio;
  t->lr_.warmup = cfg.schedule.warmup_steps;
  t->lr_.decay = cfg.schedule.decay_steps > 0 ? cfg.schedule.decay_steps
                                              : std::max<std::int64_t>(1, cfg.train.steps - cfg.schedule.warmup_steps);
  const std::int64_t run_tokens = cfg.train.steps * cfg.train.grad_accum * cfg.train.micro_batch * cfg.data.seq_len;
  t->ramp_ = {cfg.schedule.ramp, cfg.train.micro_batch, cfg.data.seq_len,
              cfg.schedule.ramp_tokens > 0 ? cfg.schedule.ramp_tokens : run_tokens / 10,
              cfg.schedule.ramp_tokens2 > 0 ? cfg.schedule.ramp_tokens2 : run_tokens * 3 / 10};

  HERD_ASSIGN_OR_RETURN(t->flops_per_token_, model::train_model_flops_per_token(model_cfg, cfg.data.seq_len,
                                                                                model::AttentionMask::causal()));
  t->unigram_entropy_ = unigram_entropy(*t->val_docs_);
  t->peak_flops_ = cfg.train.peak_gflops_per_core * 1e9 * kernels::num_threads();

  if (!cfg.checkpoint.dir.empty() && cfg.checkpoint.resume && !list_checkpoints(cfg.checkpoint.dir).empty()) {
    HERD_RETURN_IF_ERROR(t->resume());
  }
  HERD_ASSIGN_OR_RETURN(t->current_, t->loader_for(t->ramp_.at(t->tokens_)));
  if (!cfg.train.metrics_file.empty()) {
    HERD_ASSIGN_OR_RETURN(t->metrics_, MetricsWriter::open(cfg.train.metrics_file, t->resumed_from_ >= 0));
  }
  return t;
}

Result<data::Loader*> Trainer::loader_for(const BatchShape& shape) {
  for (auto& l : loaders_) {
    if (l->config().seq_len == shape.seq_len && l->config().batch_size == shape.micro_batch) return l.get();
  }
  data::LoaderConfig lc;
  lc.seq_len = shape.seq_len;
  lc.batch_size = shape.micro_batch;
  lc.seed = static_cast<std::uint64_t>(cfg_.data.seed);
  lc.max_seq_len = model_cfg_.max_seq_len;
  lc.vocab_size = model_cfg_.vocab;
  HERD_ASSIGN_OR_RETURN(data::Loader l, data::Loader::make(train_docs_, lc));
  loaders_.push_back(std::make_unique<data::Loader>(std::move(l)));
  // A new shape continues the token stream where the previous shape stopped.
  if (current_) HERD_RETURN_IF_ERROR(loaders_.back()->restore(current_->state()));
  return loaders_.back().get();
}

double Trainer::evaluate() {
  data::LoaderConfig lc;
  lc.seq_len = cfg_.data.seq_len;
  lc.batch_size = cfg_.train.micro_batch;
  lc.shuffle = false;
  lc.loop = false;
  lc.max_seq_len = model_cfg_.max_seq_len;
  lc.vocab_size = model_cfg_.vocab;
  Result<data::Loader> l = data::Loader::make(val_docs_, lc);
  HERD_CHECK(l.ok(), l.error().message());
  double sum = 0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < cfg_.eval.batches; ++i) {
    std::optional<data::Batch> b = l->next();
    if (!b) break;
    const MicroBatchData mb(std::move(*b));
    const kernels::CrossEntropyLoss r = model_->evaluate(mb.view());
    sum += r.loss_sum;
    count += r.count;
  }
  return count > 0 ? sum / static_cast<double>(count) : std::nan("");
}

Status Trainer::run(std::int64_t stop_after) {
  const std::int64_t steps = cfg_.train.steps;
  kernels::AdamWConfig ac;
  ac.beta1 = cfg_.optim.beta1;
  ac.beta2 = cfg_.optim.beta2;
  ac.eps = cfg_.optim.eps;
  ac.weight_decay = cfg_.optim.weight_decay;
  Timer wall;
  std::int64_t tokens_at_start = tokens_;
  const Result<Projection> plan = plan_run(cfg_, model_cfg_, !quiet);
  while (step_ < steps) {
    Timer step_timer;
    HERD_ASSIGN_OR_RETURN(data::Loader * next, loader_for(ramp_.at(tokens_)));
    if (next != current_) {
      HERD_RETURN_IF_ERROR(next->restore(current_->state()));
      current_ = next;
    }
    std::vector<MicroBatchData> mbs;
    std::int64_t real = 0, step_tokens = 0;
    for (std::int64_t m = 0; m < cfg_.train.grad_accum; ++m) {
      std::optional<data::Batch> b = current_->next();
      HERD_CHECK(b.has_value(), "a looping loader ran out of batches");
      real += b->n_targets();
      step_tokens += b->rows * b->seq_len;
      mbs.emplace_back(std::move(*b));
    }
    model_->zero_grads();
    double loss_sum = 0;
    const float scale = real > 0 ? 1.0f / static_cast<float>(real) : 0.0f;
    for (const MicroBatchData& mb : mbs) loss_sum += model_->forward_backward(mb.view(), scale).loss_sum;
    const double lr = lr_.at(step_);
    StepRecord rec;
    rec.grad_norm = opt_->step(model_->params(), model_->grads(), ac, lr, cfg_.optim.grad_clip);
    ++step_;
    tokens_ += step_tokens;
    const double dt = step_timer.seconds();
    rec.step = step_;
    rec.loss = real > 0 ? loss_sum / static_cast<double>(real) : 0.0;
    rec.lr = lr;
    rec.tokens = tokens_;
    rec.tokens_per_s = static_cast<double>(step_tokens) / dt;
    rec.mfu = rec.tokens_per_s * flops_per_token_ / peak_flops_;
    const bool last = step_ == steps || step_ == stop_after;
    if ((cfg_.eval.every > 0 && step_ % cfg_.eval.every == 0) || step_ == steps) rec.val_loss = evaluate();

    Json j = {{"step", rec.step},
              {"loss", rec.loss},
              {"lr", rec.lr},
              {"tokens", rec.tokens},
              {"tokens_per_s", rec.tokens_per_s},
              {"grad_norm", rec.grad_norm},
              {"mfu", rec.mfu},
              {"elapsed_s", wall.seconds()}};
    if (rec.val_loss) j["val_loss"] = *rec.val_loss;
    if (step_ == 1 || rec.val_loss) j["unigram_entropy"] = unigram_entropy_;
    metrics_.write(j);
    history_.push_back(rec);
    if (on_step) on_step(rec);
    if (!quiet && (step_ % cfg_.train.log_every == 0 || last || rec.val_loss)) {
      const double avg_tps = static_cast<double>(tokens_ - tokens_at_start) / wall.seconds();
      const double eta = static_cast<double>(steps - step_) * static_cast<double>(step_tokens) / avg_tps;
      std::string line =
          progress_line(step_, steps, rec.loss, lr, avg_tps, avg_tps * flops_per_token_ / peak_flops_, eta);
      if (rec.val_loss) line += " | val " + std::to_string(*rec.val_loss).substr(0, 6);
      log_info(line);
    }
    if (!cfg_.checkpoint.dir.empty() && (step_ % cfg_.checkpoint.every == 0 || last)) {
      HERD_RETURN_IF_ERROR(save_checkpoint());
    }
    if (step_ == stop_after) break;
  }
  report_run(plan, cfg_, history_, {16.0 * static_cast<double>(model_->param_count()), double(model_->arena().peak())},
             !quiet);
  return Status::Ok();
}

Status Trainer::save_checkpoint() const {
  Json meta = {{"tokens", tokens_},
               {"optimizer_steps", opt_->steps()},
               {"loader", current_->state().to_json()},
               {"loader_shape", {current_->config().batch_size, current_->config().seq_len}},
               {"rng", {{"init_seed", cfg_.train.seed}, {"data_seed", cfg_.data.seed}}},
               {"config", to_json(cfg_)},
               {"model", model::config_to_hf_json(model_cfg_)},
               {"param_count", model_->param_count()}};
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(model_->param_count());
  return train::save_checkpoint(
      cfg_.checkpoint.dir, step_, meta,
      {{"params", model_->params(), bytes}, {"adam_m", opt_->m(), bytes}, {"adam_v", opt_->v(), bytes}},
      cfg_.checkpoint.keep);
}

Status Trainer::resume() {
  HERD_ASSIGN_OR_RETURN(LoadedCheckpoint ck, load_latest(cfg_.checkpoint.dir, cfg_.checkpoint.fallback));
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(model_->param_count());
  HERD_ASSIGN_OR_RETURN(const std::vector<char>* p, ck.get("params", bytes));
  HERD_ASSIGN_OR_RETURN(const std::vector<char>* m, ck.get("adam_m", bytes));
  HERD_ASSIGN_OR_RETURN(const std::vector<char>* v, ck.get("adam_v", bytes));
  std::memcpy(model_->params(), p->data(), bytes);
  std::memcpy(opt_->m(), m->data(), bytes);
  std::memcpy(opt_->v(), v->data(), bytes);
  const Json& meta = ck.meta;
  if (!meta.contains("loader") || !meta.contains("tokens") || !meta.contains("optimizer_steps")) {
    return make_error(ck.path, "/manifest.json: meta lacks loader, tokens or optimizer_steps");
  }
  opt_->set_steps(meta["optimizer_steps"].get<std::int64_t>());
  step_ = ck.step;
  tokens_ = meta["tokens"].get<std::int64_t>();
  HERD_ASSIGN_OR_RETURN(data::LoaderState st, data::LoaderState::from_json(meta["loader"]));
  HERD_ASSIGN_OR_RETURN(current_, loader_for(ramp_.at(tokens_)));
  Status s = current_->restore(st);
  if (!s.ok()) return s.error().with_context(ck.path);
  resumed_from_ = step_;
  if (!quiet) log_info("resumed from ", ck.path, " (step ", step_, ", ", tokens_, " tokens)");
  return Status::Ok();
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

Result<std::unique_ptr<Trainer>> make_trainer_from_shards(const TrainConfig& cfg) {
  HERD_ASSIGN_OR_RETURN(data::TokenDocuments train, data::read_split(cfg.data.dir, "train"));
  HERD_ASSIGN_OR_RETURN(data::TokenDocuments val, data::read_split(cfg.data.dir, "val"));
  HERD_ASSIGN_OR_RETURN(model::LlamaConfig m, resolve_model_config(cfg, train.vocab_size));
  return Trainer::make(cfg, m, std::make_shared<const data::TokenDocuments>(std::move(train)),
                       std::make_shared<const data::TokenDocuments>(std::move(val)));
}

}  // namespace herd::train
