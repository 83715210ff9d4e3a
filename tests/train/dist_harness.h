// The multi-rank parity harness: a single-rank reference run and helpers to compare a layout with it.
//
// reference_run<T> trains nn::LlamaModel<T> with AdamW<T> on the loader's global batches, written
// independently of the Trainer (no slicing, no collectives): the loss of a step is the sum over every
// micro-batch / the real tokens of the step. A distributed run must reproduce its loss curve and its
// final weights by name (1e-10 relative in double, 1e-5 in fp32).
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/test_model.h"
#include "herd/comm/communicator.h"
#include "herd/data/loader.h"
#include "herd/nn/model.h"
#include "herd/parallel/rank_model.h"
#include "herd/train/job/config.h"
#include "herd/train/job/job.h"
#include "herd/train/step/lr_schedule.h"
#include "train/reference_adamw.h"

namespace herd::train::testing {

// Documents with structure (each token mostly follows from the previous one), of varied length so that
// documents cross sequence boundaries.
inline std::shared_ptr<const data::TokenDocuments> parity_docs(std::int64_t n_docs, std::uint32_t seed) {
  auto docs = std::make_shared<data::TokenDocuments>();
  docs->vocab_size = 64;
  std::mt19937 rng(seed);
  for (std::int64_t d = 0; d < n_docs; ++d) {
    std::vector<std::int32_t> ids;
    const int len = 5 + static_cast<int>(rng() % 30);
    std::int32_t t = static_cast<std::int32_t>(rng() % 64);
    for (int i = 0; i < len; ++i) {
      ids.push_back(t);
      t = (rng() % 6 == 0) ? static_cast<std::int32_t>(rng() % 64) : (t * 7 + 1) % 64;
    }
    docs->add_doc(ids);
  }
  return docs;
}

// 8 heads, 4 KV heads (GQA), vocab 64, FFN 64: divisible by TP 1, 2 and 4. Pipelines use more layers
// (6 fill up to 8 virtual stages with Llama 3's lighter ends).
inline model::LlamaConfig parity_model(std::int64_t layers = 2) {
  return herd::test_models::test_llama(
      {.name = "parity", .layers = layers, .heads = 8, .kv_heads = 4, .head_dim = 4, .max_seq = 32});
}

// Two global micro-batches of 4 sequences per step (set_layout keeps that shape for any dp).
inline TrainConfig parity_config(std::int64_t steps = 20) {
  TrainConfig c;
  c.data.seq_len = 16;
  c.train.steps = steps;
  c.train.global_batch = 8;
  c.parallel.microbatch = 4;
  c.optim.lr = 1e-2;
  c.schedule.warmup_steps = 3;
  c.eval.every = 0;
  c.checkpoint.every = 1000;
  return c;
}

// The layout of a parity run, keeping global micro-batches of `rows` sequences (microbatch = rows / dp)
// so that every layout reads the same micro-batches as the reference.
inline void set_layout(TrainConfig& c, std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp,
                       std::int64_t rows = 4) {
  c.parallel.tp = tp;
  c.parallel.cp = cp;
  c.parallel.pp = pp;
  c.parallel.dp = dp;
  c.parallel.microbatch = rows / dp;
}

template <typename T>
struct RunResult {
  std::vector<double> losses;
  std::vector<std::pair<std::string, std::vector<T>>> weights;
};

template <typename T>
RunResult<T> reference_run(const TrainConfig& cfg, const model::LlamaConfig& m,
                           std::shared_ptr<const data::TokenDocuments> docs) {
  const ResolvedLayout layout = resolve_layout(cfg).value();
  const std::int64_t rows = layout.layout.dp * layout.layout.microbatch;  // one global micro-batch
  nn::LlamaModel<T> model(m, model::Recompute::kNone, rows, cfg.data.seq_len);
  model.init_weights(static_cast<std::uint64_t>(cfg.train.seed));
  AdamW<T> opt(model.param_count());
  LrSchedule lr;
  lr.peak = cfg.optim.lr;
  lr.min_ratio = cfg.optim.min_lr_ratio;
  lr.warmup = cfg.schedule.warmup_steps;
  lr.decay = std::max<std::int64_t>(1, cfg.train.steps - cfg.schedule.warmup_steps);
  kernels::AdamWConfig ac;
  ac.beta1 = cfg.optim.beta1;
  ac.beta2 = cfg.optim.beta2;
  ac.eps = cfg.optim.eps;
  ac.weight_decay = cfg.optim.weight_decay;
  data::LoaderConfig lc;
  lc.seq_len = cfg.data.seq_len;
  lc.batch_size = rows;
  lc.seed = static_cast<std::uint64_t>(cfg.data.seed);
  data::Loader loader = data::Loader::make(docs, lc).value();
  RunResult<T> out;
  for (std::int64_t s = 0; s < cfg.train.steps; ++s) {
    std::vector<data::Batch> batches;
    std::int64_t real = 0;
    for (std::int64_t k = 0; k < layout.microbatches; ++k) {
      batches.push_back(*loader.next());
      real += batches.back().n_targets();
    }
    model.zero_grads();
    double loss = 0;
    for (const data::Batch& b : batches) {
      // Equality of ids is all attention needs; int64 ids of this small corpus fit in int32.
      std::vector<std::int32_t> doc(b.doc_ids.begin(), b.doc_ids.end());
      const nn::MicroBatch mb{b.rows, b.seq_len, b.tokens.data(), b.targets.data(), b.positions.data(), doc.data()};
      loss += model.forward_backward(mb, T(1) / static_cast<T>(real)).loss_sum;
    }
    opt.step(model.params(), model.grads(), ac, lr.at(s), cfg.optim.grad_clip);
    out.losses.push_back(loss / static_cast<double>(real));
  }
  for (const nn::NamedParam& p : model.named_params()) {
    out.weights.emplace_back(p.name, std::vector<T>(model.params() + p.offset, model.params() + p.offset + p.count()));
  }
  return out;
}

// ||a - b||_2 / ||b||_2 over one tensor (the relative error of the tensor as a whole).
template <typename T>
double rel_diff(const std::vector<T>& a, const std::vector<T>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The model of one rank of cfg's layout, as the job builds it (the layout checked first).
template <typename T>
Result<std::unique_ptr<parallel::RankModel<T>>> rank_model(const parallel::ParallelContext& ctx,
                                                           const model::LlamaConfig& m, const TrainConfig& cfg) {
  HERD_ASSIGN_OR_RETURN(const JobLayout layout, check_layout(cfg, m, 0));
  return parallel::RankModel<T>::make(ctx, m, layout.model_options(cfg.data.seq_len));
}

}  // namespace herd::train::testing
