// herd generate --checkpoint DIR --prompt TEXT: continues a prompt with a trained model, greedily or
// by temperature / nucleus (top-p) sampling. The checkpoint may come from any layout (train/checkpoint/checkpoint.h
// assembles whole tensors). The tokenizer is the one the run was trained with (from the checkpoint's
// configuration) unless --tokenizer names another file; --prompt-ids gives token ids instead of text
// (no tokenizer needed), and --json prints {"ids": [...]} per sample (the generated ids, prompt excluded;
// --logits adds the prompt's last-position logits). DIR may also be a Hugging Face model directory
// (docs/interop.md).
#include "herd/train/generate.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>

#include "herd/cli/app.h"
#include "herd/core/json_text.h"
#include "herd/data/tokenizer.h"
#include "herd/train/checkpoint/hf_checkpoint.h"

namespace herd::cli {

namespace {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  std::string prompt_ids;
  bool greedy = false;
  bool json = false;
  bool logits = false;
  std::string tokenizer;
  std::int64_t max_tokens = 100;
  double temperature = 0.0;
  double top_p = 1.0;
  std::uint64_t seed = 1;
  std::int64_t samples = 1;
  bool prompt_given = false;  // --prompt or --prompt-ids was on the command line, even as ""
  bool prompt_ids_given = false;
};

// The length of the longest prefix of `s` that does not end inside a UTF-8 sequence: what can be
// printed of a stream whose next token may complete the last character.
std::size_t complete_utf8_prefix(const std::string& s) {
  for (std::size_t k = 1; k <= 4 && k <= s.size(); ++k) {
    const auto c = static_cast<unsigned char>(s[s.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead byte
    const std::size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return len > k ? s.size() - k : s.size();
  }
  return s.size();
}

Result<std::vector<std::int32_t>> parse_ids(const std::string& text, std::int64_t vocab) {
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  while (i <= text.size()) {
    const std::size_t j = std::min(text.find(',', i), text.size());
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end == nullptr || *end != '\0' || v < 0 || v >= vocab) {
      return make_error("--prompt-ids: '", item, "' is not a token id in [0, ", vocab, "); give ids like 1,2,3");
    }
    ids.push_back(static_cast<std::int32_t>(v));
    i = j + 1;
  }
  return ids;
}

// The logits of the prompt's last position (what the first generated token is chosen from).
std::vector<float> prompt_logits(nn::LlamaModel<float>& model, const std::vector<std::int32_t>& prompt) {
  const std::int64_t t = static_cast<std::int64_t>(prompt.size()), v = model.config().vocab;
  std::vector<std::int32_t> pos(prompt.size()), doc(prompt.size(), 0), tgt(prompt.size(), -1);
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int32_t>(i);
  nn::MicroBatch mb{1, t, prompt.data(), tgt.data(), pos.data(), doc.data()};
  std::vector<float> all(static_cast<std::size_t>(t * v));
  model.logits(mb, all.data());
  return std::vector<float>(all.end() - v, all.end());
}

int run_generate(GenerateOptions o) {
  if (o.prompt_given && o.prompt.empty()) {
    return report_error("generate", make_error("--prompt: the prompt is empty; give the text to continue"));
  }
  if (o.prompt_ids_given && o.prompt_ids.empty()) {
    return report_error("generate", make_error("--prompt-ids: the prompt is empty; give token ids such as 1,2,3"));
  }
  if (o.prompt_given == o.prompt_ids_given) {
    return report_error("generate", make_error("--prompt or --prompt-ids: give exactly one of them"));
  }
  if (o.greedy) o.temperature = 0.0;
  Result<train::LoadedModel> lm = train::load_model(o.checkpoint);
  if (!lm.ok()) return report_error("generate", lm.error());
  const std::int64_t vocab = lm->model->config().vocab;
  std::optional<data::Tokenizer> tok;
  std::vector<std::int32_t> prompt;
  std::int32_t stop = -1;
  if (!o.prompt_ids.empty()) {
    Result<std::vector<std::int32_t>> ids = parse_ids(o.prompt_ids, vocab);
    if (!ids.ok()) return report_error("generate", ids.error());
    prompt = *ids;
  } else {
    std::string tok_path = o.tokenizer;
    if (tok_path.empty()) {
      const Json& c = lm->meta["config"];
      if (c.is_object() && c.contains("data") && c["data"].is_object() && c["data"].contains("tokenizer") &&
          c["data"]["tokenizer"].is_string()) {
        tok_path = c["data"]["tokenizer"].get<std::string>();
      }
    }
    // A Hugging Face directory carries its tokenizer.json beside the weights.
    if (tok_path.empty() && train::is_hf_dir(o.checkpoint) &&
        std::filesystem::is_regular_file(std::filesystem::path(o.checkpoint) / "tokenizer.json")) {
      tok_path = (std::filesystem::path(o.checkpoint) / "tokenizer.json").string();
    }
    if (tok_path.empty()) {
      return report_error("generate", make_error("--tokenizer: the checkpoint names no tokenizer; pass the file the "
                                                 "training shards were made with, or give --prompt-ids"));
    }
    Result<data::Tokenizer> t = data::Tokenizer::load(tok_path);
    if (!t.ok()) return report_error("generate", t.error());
    if (t->vocab_size() > vocab) {
      return report_error("generate", make_error("--tokenizer '", tok_path, "' has ", t->vocab_size(),
                                                 " ids but the model only ", vocab));
    }
    Result<std::vector<std::int32_t>> ids = t->encode(o.prompt);
    if (!ids.ok()) return report_error("generate", ids.error().with_context("--prompt"));
    prompt = {t->bos_id()};
    prompt.insert(prompt.end(), ids->begin(), ids->end());
    stop = t->eos_id();
    tok = std::move(*t);
  }
  // The prompt and every generated token stay within the model's context: a longer prompt is an error
  // (nothing of it is dropped unsaid), and --max-tokens is cut to the room left, with a note.
  const std::int64_t ctx = train::context_length(*lm->model);
  const auto prompt_len = static_cast<std::int64_t>(prompt.size());
  if (prompt_len >= ctx) {
    return report_error("generate",
                        make_error(o.prompt_ids.empty() ? "--prompt: " : "--prompt-ids: ", prompt_len,
                                   tok ? " tokens (with BOS)" : " tokens", " fill the model's context of ", ctx,
                                   " tokens and leave none to generate; give at most ", ctx - 1, " tokens"));
  }
  if (o.max_tokens > ctx - prompt_len) {
    std::cerr << "herd generate: note: --max-tokens " << o.max_tokens << " cut to " << ctx - prompt_len
              << ": the prompt's " << prompt_len << " tokens and the generated ones fill the model's context of " << ctx
              << " tokens\n";
    o.max_tokens = ctx - prompt_len;
  }
  for (std::int64_t s = 0; s < o.samples; ++s) {
    train::SampleOptions so;
    so.max_tokens = o.max_tokens;
    so.temperature = o.temperature;
    so.top_p = o.top_p;
    so.seed = o.seed + static_cast<std::uint64_t>(s);
    so.stop_token = stop;
    if (!o.json && tok && o.samples > 1) std::cout << "--- sample " << s + 1 << "\n" << std::flush;
    // Text and ids are streamed as they are sampled (each token flushed); --json prints each sample whole.
    std::string pending;  // decoded bytes not printed yet: the start of a character the next token ends
    std::size_t streamed = 0;
    std::optional<Error> decode_error;
    auto on_token = [&](std::int32_t id) {
      if (o.json || decode_error) return;
      if (!tok) {
        std::cout << (streamed++ ? "," : "") << id << std::flush;
        return;
      }
      if (id == stop) return;
      Result<std::string> piece = tok->decode(std::span<const std::int32_t>(&id, 1));
      if (!piece.ok()) {
        decode_error = piece.error();
        return;
      }
      pending += *piece;
      const std::size_t ready = complete_utf8_prefix(pending);
      std::cout.write(pending.data(), static_cast<std::streamsize>(ready)) << std::flush;
      pending.erase(0, ready);
    };
    const std::vector<std::int32_t> out = train::generate(*lm->model, prompt, so, on_token);
    if (decode_error) {
      std::cout << std::endl;
      return report_error("generate", *decode_error);
    }
    if (o.json) {
      std::vector<std::int32_t> gen(out.begin() + static_cast<std::ptrdiff_t>(prompt.size()), out.end());
      Json j = {{"ids", gen}, {"checkpoint", lm->path}};
      if (o.logits) j["logits"] = prompt_logits(*lm->model, prompt);
      std::cout << json_text(j) << "\n";
      continue;
    }
    std::cout << pending << std::endl;
  }
  return 0;
}

}  // namespace

Subcommand add_generate_command(CLI::App& root) {
  auto opts = std::make_shared<GenerateOptions>();
  CLI::App* app = root.add_subcommand("generate", "Continue a prompt with a model trained by herd train");
  app->add_option("--checkpoint", opts->checkpoint,
                  "A checkpoint directory of any layout (its newest step), one step_* directory, or a Hugging Face "
                  "model directory (config.json + model.safetensors)")
      ->required();
  app->add_option("--prompt", opts->prompt, "Text to continue");
  app->add_option("--prompt-ids", opts->prompt_ids, "Token ids to continue, e.g. 1,2,3 (instead of --prompt)");
  app->add_flag("--greedy", opts->greedy, "Greedy decoding (the same as --temperature 0)");
  app->add_flag("--json", opts->json, "Print {\"ids\": [...]} per sample: the generated ids, prompt excluded");
  app->add_flag(
      "--logits", opts->logits,
      "With --json: add \"logits\", the prompt's last-position logits (to compare with another implementation)");
  app->add_option("--tokenizer", opts->tokenizer,
                  "Tokenizer file (tiktoken or tokenizer.json); default: the one named in the checkpoint, or a "
                  "Hugging Face directory's tokenizer.json");
  app->add_option("--max-tokens", opts->max_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(positive_integer());
  app->add_option("--temperature", opts->temperature, "0 = greedy; else softmax temperature")
      ->capture_default_str()
      ->check(number_in(0.0, 100.0));
  app->add_option("--top-p", opts->top_p, "Nucleus sampling mass (with --temperature > 0)")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0));
  app->add_option("--seed", opts->seed, "Sampling seed")->capture_default_str();
  app->add_option("--samples", opts->samples, "Independent samples")->capture_default_str()->check(positive_integer());
  return {app, [opts, app] {
            opts->prompt_given = app->count("--prompt") > 0;
            opts->prompt_ids_given = app->count("--prompt-ids") > 0;
            return run_generate(*opts);
          }};
}

}  // namespace herd::cli
