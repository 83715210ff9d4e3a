// Sampling and the generation loop.
#include "herd/train/generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "herd/nn/init.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/checkpoint/hf_checkpoint.h"

namespace herd::train {

std::int32_t sample_token(const float* logits, std::int64_t vocab, const SampleOptions& o, std::uint64_t draw) {
  const float* best = std::max_element(logits, logits + vocab);
  if (o.temperature <= 0) return static_cast<std::int32_t>(best - logits);
  std::vector<double> p(static_cast<std::size_t>(vocab));
  double sum = 0;
  for (std::int64_t i = 0; i < vocab; ++i) {
    p[static_cast<std::size_t>(i)] = std::exp((logits[i] - *best) / o.temperature);
    sum += p[static_cast<std::size_t>(i)];
  }
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return p[a] > p[b]; });
  // Keep the smallest prefix of the sorted distribution whose mass reaches top_p.
  std::size_t keep = 0;
  double mass = 0;
  while (keep < order.size() && (keep == 0 || mass < o.top_p * sum)) mass += p[order[keep++]];
  const double u = nn::unit_uniform(nn::splitmix64(o.seed * 0x9E3779B97F4A7C15ull + draw)) * mass;
  double acc = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    acc += p[order[i]];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

std::int64_t context_length(const nn::LlamaModel<float>& model) {
  return std::min(model.config().max_seq_len, model.sized_seq_len());
}

std::vector<std::int32_t> generate(nn::LlamaModel<float>& model, const std::vector<std::int32_t>& prompt,
                                   const SampleOptions& o, const std::function<void(std::int32_t)>& on_token) {
  const std::int64_t V = model.config().vocab;
  const std::int64_t max_ctx = context_length(model);
  std::vector<std::int32_t> out = prompt;
  std::vector<float> logits;
  for (std::int64_t step = 0; step < o.max_tokens; ++step) {
    const std::int64_t start = std::max<std::int64_t>(0, static_cast<std::int64_t>(out.size()) - max_ctx);
    const std::int64_t t = static_cast<std::int64_t>(out.size()) - start;
    std::vector<std::int32_t> pos(static_cast<std::size_t>(t)), doc(static_cast<std::size_t>(t), 0),
        tgt(static_cast<std::size_t>(t), -1);
    std::iota(pos.begin(), pos.end(), 0);
    nn::MicroBatch mb{1, t, out.data() + start, tgt.data(), pos.data(), doc.data()};
    logits.resize(static_cast<std::size_t>(t * V));
    model.logits(mb, logits.data());
    const std::int32_t next = sample_token(logits.data() + (t - 1) * V, V, o, static_cast<std::uint64_t>(step));
    out.push_back(next);
    if (on_token) on_token(next);
    if (next == o.stop_token) break;
  }
  return out;
}

namespace {

// Every named weight of `model` as one piece covering the whole tensor, its moments into scratch.
template <typename T>
std::vector<parallel::ShardPiece<T>> whole_pieces(const nn::LlamaModel<float>& model, std::vector<T>& params,
                                                  std::vector<T>& scratch) {
  params.assign(static_cast<std::size_t>(model.param_count()), T(0));
  scratch.assign(2 * static_cast<std::size_t>(model.param_count()), T(0));
  std::vector<parallel::ShardPiece<T>> out;
  for (const nn::NamedParam& p : model.named_params()) {
    parallel::ShardPiece<T> s;
    s.name = p.name;
    s.rows = p.rows;
    s.cols = p.cols;
    s.r1 = p.rows;
    s.c1 = p.cols;
    s.e1 = p.count();
    s.param = params.data() + p.offset;
    s.m = scratch.data() + p.offset;
    s.v = scratch.data() + model.param_count() + p.offset;
    out.push_back(s);
  }
  return out;
}

template <typename T>
Status load_whole(const DistCheckpoint& ck, nn::LlamaModel<float>& model) {
  std::vector<T> params, scratch;
  std::vector<parallel::ShardPiece<T>> pieces = whole_pieces<T>(model, params, scratch);
  HERD_RETURN_IF_ERROR(ck.load_into<T>(pieces));
  for (std::size_t i = 0; i < params.size(); ++i) model.params()[i] = static_cast<float>(params[i]);
  return Status::Ok();
}

}  // namespace

Result<LoadedModel> load_model(const std::string& dir) {
  if (is_hf_dir(dir)) {
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<HfModelDir> hf, HfModelDir::open(dir));
    LoadedModel lm;
    // Sized for contexts of up to 4096 tokens (a published model's 128K context would need a huge arena).
    const std::int64_t ctx = std::min<std::int64_t>(hf->config().max_seq_len, 4096);
    lm.model = std::make_unique<nn::LlamaModel<float>>(hf->config(), model::Recompute::kNone, 1, ctx);
    std::vector<float> params, scratch;
    std::vector<parallel::ShardPiece<float>> pieces = whole_pieces<float>(*lm.model, params, scratch);
    HERD_RETURN_IF_ERROR(hf->load_into<float>(pieces));
    std::copy(params.begin(), params.end(), lm.model->params());
    lm.meta = Json{{"model", model::config_to_hf_json(hf->config())}, {"source", {{"hf_dir", dir}}}};
    lm.path = dir;
    return lm;
  }
  HERD_ASSIGN_OR_RETURN(DistCheckpoint ck, open_checkpoint(dir));
  const Json& meta = ck.meta();
  if (!meta.contains("model")) return make_error(ck.path, "/manifest.json: no model configuration in meta");
  HERD_ASSIGN_OR_RETURN(model::LlamaConfig cfg, model::config_from_hf_json(meta["model"], ck.path + " meta.model"));
  LoadedModel lm;
  lm.model = std::make_unique<nn::LlamaModel<float>>(cfg, model::Recompute::kNone, 1, cfg.max_seq_len);
  // Whatever layout wrote it: each tensor is assembled from the writers' pieces (checkpoint.h).
  HERD_RETURN_IF_ERROR(ck.elem() == "fp64" ? load_whole<double>(ck, *lm.model) : load_whole<float>(ck, *lm.model));
  lm.meta = meta;
  lm.path = ck.path;
  return lm;
}

}  // namespace herd::train
