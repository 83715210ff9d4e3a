// herd model NAME_OR_CONFIG [--seq-len N] [--json]: the configuration, parameter breakdown and FLOPs
// per token of one model, from model/ only.
#include <cstdio>
#include <iostream>

#include "herd/cli/app.h"
#include "herd/cli/table.h"
#include "herd/core/format.h"
#include "herd/core/json_text.h"
#include "herd/model/activations.h"
#include "herd/model/config.h"
#include "herd/model/flops.h"
#include "herd/model/params.h"

namespace herd::cli {

namespace {

struct ModelOptions {
  std::string model;
  std::int64_t seq_len = 8192;
  std::int64_t micro_batch = 1;
  bool json = false;
};

Json model_json(const model::LlamaConfig& cfg, std::int64_t seq_len, const model::ForwardFlops& fwd, double train_6n,
                double train_exact, double train_hw_none, double train_hw_full) {
  const model::ModelParams p = model::model_params(cfg);
  Json j;
  j["name"] = cfg.name;
  j["params_total"] = p.total();
  j["params_embedding"] = p.embedding;
  j["params_output"] = p.output;
  j["params_per_layer"] = p.layer.total();
  j["params_attention"] = p.attention_total();
  j["params_mlp"] = p.mlp_total();
  j["params_norms"] = p.norms_total();
  j["n_layers"] = cfg.n_layers;
  j["hidden"] = cfg.hidden;
  j["ffn_hidden"] = cfg.ffn_hidden;
  j["n_heads"] = cfg.n_heads;
  j["n_kv_heads"] = cfg.n_kv_heads;
  j["head_dim"] = cfg.head_dim;
  j["vocab"] = cfg.vocab;
  j["seq_len"] = seq_len;
  j["flops_per_token_train"] = train_6n;
  j["flops_convention"] = "model FLOPs: 6 x params_total + 12 x n_layers x n_heads x head_dim x (T+1)/2 (causal)";
  j["flops_per_token_train_exact"] = train_exact;
  j["flops_per_token_train_hardware"] = {{"recompute_none", train_hw_none}, {"recompute_full", train_hw_full}};
  j["flops_per_token_forward"] = {{"attention_linear", fwd.attention_linear},
                                  {"mlp", fwd.mlp},
                                  {"output_head", fwd.output_head},
                                  {"attention_core", fwd.attention_core},
                                  {"total", fwd.total()}};
  j["config"] = model::config_to_hf_json(cfg);
  return j;
}

int run_model(const ModelOptions& o) {
  Result<model::LlamaConfig> cfg = model::resolve_model(o.model);
  if (!cfg.ok()) return report_error("model", cfg.error());
  if (o.seq_len <= 0) return report_error("model", make_error("--seq-len: must be positive, got ", o.seq_len));
  // The FLOP and activation math below assumes a valid shape (an odd length, or one whose activations
  // overflow 64-bit byte counts, would stop at an internal check): refuse it here, naming the options.
  model::ActivationShape shape;
  shape.seq_len = o.seq_len;
  shape.micro_batch = o.micro_batch;
  if (Status s = model::validate_activation_shape(*cfg, shape); !s.ok()) {
    return report_error("model", s.error().with_context("--seq-len " + std::to_string(o.seq_len) +
                                                        " --microbatch-size " + std::to_string(o.micro_batch)));
  }
  const auto causal = model::AttentionMask::causal();
  const model::ForwardFlops fwd = *model::forward_flops_per_token(*cfg, o.seq_len, causal);
  const double t6n = *model::train_model_flops_per_token(*cfg, o.seq_len, causal, model::FlopConvention::kSixN);
  const double tex = *model::train_model_flops_per_token(*cfg, o.seq_len, causal, model::FlopConvention::kExact);
  const double hw_none = *model::train_hardware_flops_per_token(*cfg, o.seq_len, causal, model::Recompute::kNone);
  const double hw_full = *model::train_hardware_flops_per_token(*cfg, o.seq_len, causal, model::Recompute::kFull);
  if (o.json) {
    std::cout << json_text(model_json(*cfg, o.seq_len, fwd, t6n, tex, hw_none, hw_full), 2) << "\n";
    return 0;
  }

  const model::LlamaConfig& c = *cfg;
  std::cout << "Model " << c.name << "\n\n";
  Table conf({"field", "value"});
  conf.add({"hidden", std::to_string(c.hidden)});
  conf.add({"ffn_hidden", std::to_string(c.ffn_hidden)});
  conf.add({"layers", std::to_string(c.n_layers)});
  conf.add({"heads / kv heads / head_dim",
            std::to_string(c.n_heads) + " / " + std::to_string(c.n_kv_heads) + " / " + std::to_string(c.head_dim)});
  conf.add({"vocab", std::to_string(c.vocab)});
  conf.add({"max sequence", std::to_string(c.max_seq_len)});
  conf.add({"mlp / norm / position", std::string(model::mlp_name(c.mlp)) + " / " + model::norm_name(c.norm) + " / " +
                                         model::position_name(c.position)});
  conf.add({"rope theta",
            format_fixed(c.rope_theta, 0) +
                (c.rope_scaling.enabled() ? " (llama3 scaling x" + format_fixed(c.rope_scaling.factor, 0) + ")" : "")});
  conf.add({"tied embeddings", c.tie_embeddings ? "yes" : "no"});
  conf.print(std::cout);

  const model::ModelParams p = model::model_params(c);
  std::cout << "\nParameters\n";
  Table params({"component", "parameters", "share"});
  for (const auto& row : model::param_breakdown(c)) {
    params.add({row.name, format_thousands(row.count),
                format_fixed(100.0 * static_cast<double>(row.count) / static_cast<double>(p.total()), 2) + "%"});
  }
  params.add({"per layer", format_thousands(p.layer.total()), ""});
  params.add({"total", format_thousands(p.total()), "100.00%"});
  params.print(std::cout);

  std::cout << "\nFLOPs per token at sequence length " << o.seq_len << " (causal mask)\n";
  Table flops({"term", "forward", "training (x3)"});
  flops.add({"attention q/k/v/o", format_sci(fwd.attention_linear), format_sci(3 * fwd.attention_linear)});
  flops.add({"mlp", format_sci(fwd.mlp), format_sci(3 * fwd.mlp)});
  flops.add({"output head", format_sci(fwd.output_head), format_sci(3 * fwd.output_head)});
  flops.add({"attention scores (QK^T, PV)", format_sci(fwd.attention_core), format_sci(3 * fwd.attention_core)});
  flops.add({"total (exact matmuls)", format_sci(fwd.total()), format_sci(tex)});
  flops.print(std::cout);
  std::cout << "\nModel FLOPs per training token (6N + causal attention): " << format_sci(t6n) << "\n";
  std::cout << "Hardware FLOPs per training token (flash backward recompute): " << format_sci(hw_none)
            << "; with full activation recompute: " << format_sci(hw_full) << "\n";

  std::cout << "\nActivations kept per layer, micro-batch " << o.micro_batch << " x " << o.seq_len
            << " tokens, bf16, no parallelism\n";
  Table act({"recompute", "bytes per layer", "all layers"});
  for (model::Recompute r : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    model::ActivationShape s;
    s.seq_len = o.seq_len;
    s.micro_batch = o.micro_batch;
    s.recompute = r;
    const std::int64_t b = model::layer_activation_bytes(c, s);
    act.add({model::recompute_name(r), format_bytes(static_cast<double>(b)),
             format_bytes(static_cast<double>(b) * static_cast<double>(c.n_layers))});
  }
  act.print(std::cout);
  return 0;
}

}  // namespace

Subcommand add_model_command(CLI::App& root) {
  auto opts = std::make_shared<ModelOptions>();
  CLI::App* app =
      root.add_subcommand("model", "Print a model's configuration, parameter breakdown and FLOPs per token");
  app->add_option("model", opts->model,
                  "A preset (llama3-8b, llama3-70b, llama3-405b, tiny, small) or a Hugging Face config.json")
      ->required();
  app->add_option("--seq-len", opts->seq_len, "Sequence length for the attention FLOPs and activations")
      ->capture_default_str()
      ->check(positive_integer());
  app->add_option("--microbatch-size", opts->micro_batch, "Sequences per micro-batch for the activation table")
      ->capture_default_str()
      ->check(positive_integer());
  app->add_flag("--json", opts->json, "Print one JSON object instead of tables");
  return {app, [opts] { return run_model(*opts); }};
}

}  // namespace herd::cli
