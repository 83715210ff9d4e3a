// Text generation from a trained model: greedy, temperature and nucleus (top-p) sampling.
//
// Every new token re-runs the forward over the whole context (the last max_seq_len tokens; no KV
// cache): the models herd trains on a CPU are small, and this reuses the training layers unchanged.
// Sampling draws from counter-based random numbers (splitmix64 of seed and token index), so a seed
// reproduces a sample exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/core/json.h"
#include "herd/nn/model.h"

namespace herd::train {

struct SampleOptions {
  std::int64_t max_tokens = 64;
  double temperature = 0.0;  // 0: greedy (argmax)
  double top_p = 1.0;        // nucleus: sample among the most likely tokens holding this much mass
  std::uint64_t seed = 1;
  std::int32_t stop_token = -1;  // end generation at this id (e.g. EOS); -1: none
};

// The index of the next token given the logits of the last position (size V).
std::int32_t sample_token(const float* logits, std::int64_t vocab, const SampleOptions& o, std::uint64_t draw);

// The most tokens the model reads at once: its max_seq_len, or the sequence length its arena was sized
// for if shorter. `herd generate` keeps the prompt and every generated token within it.
std::int64_t context_length(const nn::LlamaModel<float>& model);

// The prompt followed by the generated tokens. `on_token` (may be empty) receives each token as it is
// sampled, before the next one is computed: what `herd generate` streams to stdout. Beyond the context
// the window slides (the oldest tokens drop out).
std::vector<std::int32_t> generate(nn::LlamaModel<float>& model, const std::vector<std::int32_t>& prompt,
                                   const SampleOptions& o, const std::function<void(std::int32_t)>& on_token = nullptr);

// A trained model from a checkpoint: DIR may be a run's checkpoint directory (the newest verifying
// step is used), one step directory, or a Hugging Face model directory (hf_checkpoint.h). `meta` receives the
// checkpoint's meta (config, tokenizer path).
struct LoadedModel {
  std::unique_ptr<nn::LlamaModel<float>> model;
  Json meta;
  std::string path;
};
Result<LoadedModel> load_model(const std::string& dir);

}  // namespace herd::train
