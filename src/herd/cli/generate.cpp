// herd generate --checkpoint DIR --prompt TEXT: continues a prompt with a trained model, greedily or
// by temperature / nucleus (top-p) sampling. The tokenizer is the one the run was trained with (from the
// checkpoint's configuration) unless --tokenizer names another file.
#include "herd/train/generate.h"

#include <iostream>

#include "herd/cli/app.h"
#include "herd/data/tokenizer.h"

namespace herd::cli {

namespace {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  std::string tokenizer;
  std::int64_t max_tokens = 100;
  double temperature = 0.0;
  double top_p = 1.0;
  std::uint64_t seed = 1;
  std::int64_t samples = 1;
};

int run_generate(const GenerateOptions& o) {
  Result<train::LoadedModel> lm = train::load_model(o.checkpoint);
  if (!lm.ok()) return report_error("generate", lm.error());
  std::string tok_path = o.tokenizer;
  if (tok_path.empty()) {
    const Json& c = lm->meta["config"];
    if (c.contains("data") && c["data"].contains("tokenizer")) tok_path = c["data"]["tokenizer"].get<std::string>();
  }
  if (tok_path.empty()) {
    return report_error("generate", make_error("--tokenizer: the checkpoint names no tokenizer; pass the file the "
                                               "training shards were made with"));
  }
  Result<data::Tokenizer> tok = data::Tokenizer::load(tok_path);
  if (!tok.ok()) return report_error("generate", tok.error());
  if (tok->vocab_size() > lm->model->config().vocab) {
    return report_error("generate", make_error("--tokenizer '", tok_path, "' has ", tok->vocab_size(),
                                               " ids but the model only ", lm->model->config().vocab));
  }
  Result<std::vector<std::int32_t>> ids = tok->encode(o.prompt);
  if (!ids.ok()) return report_error("generate", ids.error().with_context("--prompt"));
  std::vector<std::int32_t> prompt = {tok->bos_id()};
  prompt.insert(prompt.end(), ids->begin(), ids->end());
  for (std::int64_t s = 0; s < o.samples; ++s) {
    train::SampleOptions so;
    so.max_tokens = o.max_tokens;
    so.temperature = o.temperature;
    so.top_p = o.top_p;
    so.seed = o.seed + static_cast<std::uint64_t>(s);
    so.stop_token = tok->eos_id();
    std::vector<std::int32_t> out = train::generate(*lm->model, prompt, so);
    std::vector<std::int32_t> text(out.begin() + 1, out.end());
    if (!text.empty() && text.back() == tok->eos_id()) text.pop_back();
    Result<std::string> dec = tok->decode(text);
    if (!dec.ok()) return report_error("generate", dec.error());
    if (o.samples > 1) std::cout << "--- sample " << s + 1 << "\n";
    std::cout << *dec << "\n";
  }
  return 0;
}

}  // namespace

Subcommand add_generate_command(CLI::App& root) {
  auto opts = std::make_shared<GenerateOptions>();
  CLI::App* app = root.add_subcommand("generate", "Continue a prompt with a model trained by herd train");
  app->add_option("--checkpoint", opts->checkpoint, "A checkpoint directory (its newest step) or one step_* directory")
      ->required();
  app->add_option("--prompt", opts->prompt, "Text to continue")->required();
  app->add_option("--tokenizer", opts->tokenizer, "Tokenizer file; default: the one named in the checkpoint");
  app->add_option("--max-tokens", opts->max_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--temperature", opts->temperature, "0 = greedy; else softmax temperature")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  app->add_option("--top-p", opts->top_p, "Nucleus sampling mass (with --temperature > 0)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--seed", opts->seed, "Sampling seed")->capture_default_str();
  app->add_option("--samples", opts->samples, "Independent samples")->capture_default_str()->check(CLI::PositiveNumber);
  return {app, [opts] { return run_generate(*opts); }};
}

}  // namespace herd::cli
