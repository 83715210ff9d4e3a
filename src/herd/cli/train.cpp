// herd train [CONFIG.json] [--section.field=value ...]: trains a Llama 3 model on one CPU rank from the
// token shards `herd data` writes, prints the resolved configuration, a progress line, held-out losses,
// and samples at the end. Configuration: src/herd/train/config.h; the loop: src/herd/train/trainer.h;
// docs/training.md.
//
// --tp T --cp C --pp P --dp D (the config keys parallel.tp, parallel.cp, parallel.pp and parallel.dp; --v,
// --microbatches, --n, --schedule, --no-sp and --backend likewise) make it a TP x CP x PP x DP job (train/job.h,
// docs/distributed.md): ranks as threads of this process, or, under `mpirun -np N herd train ...`, this process as one
// rank (detected from the environment).
#include <iostream>

#include "herd/cli/app.h"
#include "herd/cli/table.h"
#include "herd/core/format.h"
#include "herd/core/log.h"
#include "herd/data/tokenizer.h"
#include "herd/kernels/gemm.h"
#include "herd/model/params.h"
#include "herd/train/dist_model.h"
#include "herd/train/generate.h"
#include "herd/train/job.h"
#include "herd/train/trainer.h"

namespace herd::cli {

namespace {

struct TrainOptions {
  std::string config;
  std::int64_t stop_after = 0;
  bool print_config = false;
  std::int64_t tp = 0, cp = 0, pp = 0, dp = 0;  // 0: the config's parallel.tp / cp / pp / dp
  std::int64_t v = 0, microbatches = 0, n = 0;  // 0: the config's parallel.v, train.grad_accum, parallel.pp_n
  std::string schedule;
  bool no_sp = false;
  std::string backend;
};

void print_resolved(const train::TrainConfig& cfg, const model::LlamaConfig& m) {
  Table t({"key", "value", "meaning"});
  for (const train::FieldInfo& f : train::describe(cfg)) {
    t.add({f.key, f.value.is_string() ? f.value.get<std::string>() : f.value.dump(), f.doc});
  }
  t.print(std::cout);
  std::cout << "\nmodel " << m.name << ": " << format_thousands(model::model_params(m).total()) << " parameters, "
            << m.n_layers << " layers, hidden " << m.hidden << ", heads " << m.n_heads << "/" << m.n_kv_heads
            << ", vocab " << m.vocab << "; BLAS " << kernels::blas_name() << ", " << kernels::num_threads()
            << " threads\n\n";
  std::cout.flush();
}

void print_samples(const train::TrainConfig& cfg, train::Trainer& t) {
  if (cfg.data.tokenizer.empty() || cfg.generate.samples == 0) return;
  Result<data::Tokenizer> tok = data::Tokenizer::load(cfg.data.tokenizer);
  if (!tok.ok()) {
    log_warning("no samples: ", tok.error().message());
    return;
  }
  Result<std::vector<std::int32_t>> ids = tok->encode(cfg.generate.prompt);
  if (!ids.ok()) return;
  std::vector<std::int32_t> prompt = {tok->bos_id()};
  prompt.insert(prompt.end(), ids->begin(), ids->end());
  std::cout << "\nSamples (prompt \"" << cfg.generate.prompt << "\"; greedy, then temperature 0.8 top-p 0.95)\n";
  for (std::int64_t s = 0; s < cfg.generate.samples; ++s) {
    train::SampleOptions o;
    o.max_tokens = cfg.generate.max_tokens;
    o.temperature = s == 0 ? 0.0 : 0.8;
    o.top_p = 0.95;
    o.seed = static_cast<std::uint64_t>(s);
    o.stop_token = tok->eos_id();
    const std::vector<std::int32_t> out = train::generate(t.model(), prompt, o);
    std::vector<std::int32_t> text(out.begin() + 1, out.end());
    if (!text.empty() && text.back() == tok->eos_id()) text.pop_back();
    Result<std::string> dec = tok->decode(text);
    std::cout << "--- sample " << s + 1 << "\n" << (dec.ok() ? *dec : dec.error().message()) << "\n";
  }
}

int run_parallel(const train::TrainConfig& cfg) {
  train::JobResult<float> out;
  Status s = train::run_parallel_job<float>(cfg, train::distributed_llama_factory<float>(), &out);
  if (!s.ok()) return report_error("train", s.error());
  return 0;
}

int run_train(const TrainOptions& o, std::vector<std::string> overrides) {
  if (o.tp > 0) overrides.push_back("parallel.tp=" + std::to_string(o.tp));
  if (o.cp > 0) overrides.push_back("parallel.cp=" + std::to_string(o.cp));
  if (o.pp > 0) overrides.push_back("parallel.pp=" + std::to_string(o.pp));
  if (o.v > 0) overrides.push_back("parallel.v=" + std::to_string(o.v));
  if (o.microbatches > 0) overrides.push_back("train.grad_accum=" + std::to_string(o.microbatches));
  if (o.n > 0) overrides.push_back("parallel.pp_n=" + std::to_string(o.n));
  if (!o.schedule.empty()) overrides.push_back("parallel.pp_schedule=" + o.schedule);
  if (o.dp > 0) overrides.push_back("parallel.dp=" + std::to_string(o.dp));
  if (o.no_sp) overrides.push_back("parallel.sequence_parallel=false");
  if (!o.backend.empty()) overrides.push_back("parallel.backend=" + o.backend);
  Result<train::TrainConfig> cfg = train::load_config(o.config, overrides);
  if (!cfg.ok()) return report_error("train", cfg.error());
  if (o.print_config) {
    std::cout << train::to_json(*cfg).dump(2) << "\n";
    return 0;
  }
  Result<comm::Backend> backend = train::resolve_backend(*cfg);
  if (!backend.ok()) return report_error("train", backend.error());
  // Pipeline options on one rank go the distributed way too, whose layout check refuses them.
  if (cfg->parallel.world() > 1 || cfg->parallel.v > 1 || *backend == comm::Backend::kMpi) return run_parallel(*cfg);
  Result<std::unique_ptr<train::Trainer>> t = train::make_trainer_from_shards(*cfg);
  if (!t.ok()) return report_error("train", t.error());
  print_resolved(*cfg, (*t)->model().config());
  log_info("unigram entropy of the held-out tokens: ", format_fixed((*t)->val_unigram_entropy(), 3), " nats/token");
  Status s = (*t)->run(o.stop_after);
  if (!s.ok()) return report_error("train", s.error());
  print_samples(*cfg, **t);
  return 0;
}

}  // namespace

Subcommand add_train_command(CLI::App& root) {
  auto opts = std::make_shared<TrainOptions>();
  CLI::App* app = root.add_subcommand(
      "train", "Train a Llama 3 model on one CPU rank from `herd data` shards (config file + --section.field=value)");
  app->add_option("config", opts->config, "JSON config file ({\"optim\": {\"lr\": 3e-3}, ...}); optional");
  app->add_option("--stop-after", opts->stop_after, "Stop after this step with a checkpoint (as a preempted job)");
  app->add_flag("--print-config", opts->print_config, "Print the resolved configuration as JSON and exit");
  app->add_option("--tp", opts->tp, "Tensor-parallel degree (parallel.tp)")->check(positive_integer());
  app->add_option("--cp", opts->cp, "Context-parallel degree (parallel.cp)")->check(positive_integer());
  app->add_option("--pp", opts->pp, "Pipeline-parallel degree (parallel.pp)")->check(positive_integer());
  app->add_option("--v", opts->v, "Virtual pipeline stages per rank (parallel.v)")->check(positive_integer());
  app->add_option("--microbatches", opts->microbatches, "Micro-batches per step, the pipeline's M (train.grad_accum)")
      ->check(positive_integer());
  app->add_option("--n", opts->n, "Micro-batches per chunk before switching, N (parallel.pp_n; default pp)")
      ->check(positive_integer());
  app->add_option("--schedule", opts->schedule,
                  "Pipeline schedule: flexible (Llama 3, default), interleaved, 1f1b, gpipe (parallel.pp_schedule)");
  app->add_option("--dp", opts->dp, "Data-parallel (FSDP) degree (parallel.dp)")->check(positive_integer());
  app->add_flag("--no-sp", opts->no_sp, "Sequence parallelism off (parallel.sequence_parallel=false)");
  app->add_option("--backend", opts->backend,
                  "local (ranks as threads), mpi (under mpirun) or auto (parallel.backend)");
  app->allow_extras();
  app->footer(
      "Every field of the configuration can be overridden as --section.field=value, e.g. --optim.lr=1e-3 "
      "--train.steps=500; --print-config prints them as JSON, and every run starts with a table of each field "
      "and its meaning. Sections: model, data, optim, schedule, train, eval, checkpoint, generate, parallel, "
      "comm (deterministic, dump_dir, recorder_size: the communicator), projection (cluster_file: a herd "
      "calibrate output; background_jobs: -1 measures, 0 declares an idle host). See docs/training.md and "
      "docs/distributed.md.");
  return {app, [opts, app] { return run_train(*opts, app->remaining()); }};
}

}  // namespace herd::cli
