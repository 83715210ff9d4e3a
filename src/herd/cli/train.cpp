// herd train [--config FILE] [--tp T] [--dp D] [--no-sp] [--backend B] [section.key=value ...]
//
// One rank and the local backend: the single-rank trainer (train/trainer.h). Otherwise a TP x DP job
// (train/job.h): ranks as threads of this process (local), or this process as one rank of a job that
// `mpirun -np N herd train ...` started (mpi; detected from the environment). --tp/--dp/--no-sp/
// --backend are shorthands for the config keys parallel.tp, parallel.dp, parallel.sequence_parallel
// and parallel.backend, which a config file may set as well; flags win over the file.
#include <iostream>

#include "herd/cli/app.h"
#include "herd/train/config.h"
#include "herd/train/dist_model.h"
#include "herd/train/job.h"
#include "herd/train/trainer.h"

namespace herd::cli {

namespace {

struct TrainOptions {
  std::string config;
  std::int64_t tp = 0, dp = 0;
  bool no_sp = false;
  std::string backend;
  bool print_config = false;
  std::vector<std::string> overrides;
};

int run_train(const TrainOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  if (o.tp > 0) overrides.push_back("parallel.tp=" + std::to_string(o.tp));
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
  if (cfg->parallel.tp * cfg->parallel.dp == 1 && *backend == comm::Backend::kLocal) {
    Result<std::unique_ptr<train::Trainer>> t = train::make_trainer_from_shards(*cfg);
    if (!t.ok()) return report_error("train", t.error());
    Status s = (*t)->run();
    if (!s.ok()) return report_error("train", s.error());
    return 0;
  }
  train::JobResult<float> out;
  Status s = train::run_parallel_job<float>(*cfg, train::distributed_llama_factory<float>(), &out);
  if (!s.ok()) return report_error("train", s.error());
  return 0;
}

}  // namespace

Subcommand add_train_command(CLI::App& root) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* app = root.add_subcommand("train", "Train a model on `herd data` shards, on one rank or as a TP x DP job");
  app->add_option("--config", o->config, "JSON config file ({\"section\": {\"key\": value}}); see --print-config");
  app->add_option("--tp", o->tp, "Tensor-parallel degree (parallel.tp)")->check(positive_integer());
  app->add_option("--dp", o->dp, "Data-parallel (FSDP) degree (parallel.dp)")->check(positive_integer());
  app->add_flag("--no-sp", o->no_sp, "Turn sequence parallelism off (parallel.sequence_parallel=false)");
  app->add_option("--backend", o->backend, "local (ranks as threads), mpi (under mpirun) or auto (parallel.backend)");
  app->add_flag("--print-config", o->print_config, "Print the resolved configuration as JSON and exit");
  app->add_option("overrides", o->overrides, "Config overrides: section.key=value (e.g. train.steps=50)");
  return {app, [o] { return run_train(*o); }};
}

}  // namespace herd::cli
