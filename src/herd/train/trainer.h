// The single-rank training loop.
//
// One step: the loader's next grad_accum micro-batches (its shape from the batch ramp), the real-token
// count of all of them (the loss is the mean over the step's real tokens, so each micro-batch's
// gradient is scaled by 1 / that count and they add up in the FP32 gradient buffer), global-norm
// clipping, AdamW at the scheduled rate; then metrics, the progress line, periodic held-out evaluation
// and checkpoints. A checkpoint holds the weights, both AdamW moments, the optimizer step, the tokens
// seen and the loader's position (there is no other randomness in a step: no dropout, and the weights'
// initial values are a function of train.seed), so a resumed run continues bit for bit.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "herd/data/loader.h"
#include "herd/data/shard.h"
#include "herd/nn/model.h"
#include "herd/train/config.h"
#include "herd/train/lr_schedule.h"
#include "herd/train/metrics.h"
#include "herd/train/optimizer.h"

namespace herd::train {

struct StepRecord {
  std::int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  std::int64_t tokens = 0;  // cumulative tokens processed
  double tokens_per_s = 0;
  double mfu = 0;
  double comm_wait_s = -1;  // this rank's time blocked in collectives during the step; -1: not measured
  std::optional<double> val_loss;
};

class Trainer {
 public:
  // Builds the model and loaders from the config and the two token splits; resumes from the newest
  // checkpoint in checkpoint.dir when checkpoint.resume and one exists.
  static Result<std::unique_ptr<Trainer>> make(const TrainConfig& cfg, const model::LlamaConfig& model_cfg,
                                               std::shared_ptr<const data::TokenDocuments> train_docs,
                                               std::shared_ptr<const data::TokenDocuments> val_docs);

  // Runs until train.steps, or stops after step `stop_after` (> 0) with a checkpoint, as a preempted job
  // would. Every step is reported to `on_step` when set.
  Status run(std::int64_t stop_after = 0);

  // Mean loss over the first eval.batches micro-batches of the held-out split.
  double evaluate();

  std::int64_t step() const { return step_; }
  std::int64_t resumed_from() const { return resumed_from_; }
  double val_unigram_entropy() const { return unigram_entropy_; }
  const std::vector<StepRecord>& history() const { return history_; }
  nn::LlamaModel<float>& model() { return *model_; }
  std::function<void(const StepRecord&)> on_step;
  bool quiet = false;  // no progress lines (tests)

  Status save_checkpoint() const;

 private:
  Trainer() = default;
  Status resume();
  Result<data::Loader*> loader_for(const BatchShape& shape);

  TrainConfig cfg_;
  model::LlamaConfig model_cfg_;
  std::shared_ptr<const data::TokenDocuments> train_docs_, val_docs_;
  std::unique_ptr<nn::LlamaModel<float>> model_;
  std::unique_ptr<AdamW<float>> opt_;
  std::vector<std::unique_ptr<data::Loader>> loaders_;  // one per batch shape of the ramp
  data::Loader* current_ = nullptr;
  LrSchedule lr_;
  BatchRamp ramp_;
  MetricsWriter metrics_;
  std::int64_t step_ = 0;
  std::int64_t tokens_ = 0;
  std::int64_t resumed_from_ = -1;
  double flops_per_token_ = 0;
  double peak_flops_ = 0;
  std::vector<StepRecord> history_;
  double unigram_entropy_ = 0;
};

// Entropy of the token frequencies (nats/token): the loss of the best model that ignores context.
double unigram_entropy(const data::TokenDocuments& docs);

// Reads data.dir's "train" and "val" splits and builds a Trainer (the `herd train` path).
Result<std::unique_ptr<Trainer>> make_trainer_from_shards(const TrainConfig& cfg);

// The model the config names (a preset or config.json, with model.vocab applied) checked against the
// data: a sequence longer than the model allows is an error naming data.seq_len.
Result<model::LlamaConfig> resolve_model_config(const TrainConfig& cfg, std::int64_t data_vocab);

}  // namespace herd::train
