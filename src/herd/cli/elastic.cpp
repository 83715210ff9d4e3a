// Elastic re-planning (elastic.h): the planner's search on fewer ranks, and the command rewritten.
#include "herd/cli/elastic.h"

#include <algorithm>
#include <array>
#include <memory>
#include <sstream>

#include "herd/core/format.h"
#include "herd/core/log.h"
#include "herd/planner/estimate.h"
#include "herd/train/job/job.h"
#include "herd/train/plan/projection.h"

namespace herd::cli {

namespace {

planner::TrainingSpec training_spec(const train::TrainConfig& cfg) {
  planner::TrainingSpec spec;
  spec.seq_len = cfg.data.seq_len;
  spec.global_batch = cfg.train.global_batch;
  spec.precision = train::planned_precision(cfg);
  spec.system.software = planner::Software::kHerd;
  return spec;
}

// The flags that set a layout, each followed by its value, and the config keys that set the same.
constexpr std::array<const char*, 11> kLayoutFlags = {
    "--tp",     "--cp",   "--pp", "--dp", "--v", "--microbatch-size", "--n", "--recompute", "--sequence-parallel",
    "--layout", "--ranks"};
constexpr std::array<const char*, 11> kReplacedKeys = {
    "--parallel.tp=",     "--parallel.cp=",        "--parallel.pp=",
    "--parallel.dp=",     "--parallel.v=",         "--parallel.microbatch_size=",
    "--parallel.n=",      "--parallel.recompute=", "--parallel.sequence_parallel=",
    "--fault.lose_rank=", "--fault.lose_step="};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

Result<planner::PlanResult> plan_for_run(const train::TrainConfig& cfg, const model::LlamaConfig& m, std::int64_t ranks,
                                         planner::SearchSpace space) {
  HERD_ASSIGN_OR_RETURN(const topology::Cluster cluster, train::local_cpu_cluster(cfg.projection.cluster_file));
  space.reshard_after_forward = cfg.parallel.reshard_after_forward;
  space.zero = ranks > 1 ? 3 : 0;  // herd's FSDP flat units; one rank is plain AdamW (train/plan/projection.h)
  return planner::plan(m, cluster, training_spec(cfg), ranks, space, 100);
}

Result<ElasticChoice> best_layout_within(const train::TrainConfig& cfg, const model::LlamaConfig& m,
                                         std::int64_t ranks) {
  train::TrainConfig base = cfg;
  base.fault.lose_rank = -1;  // that loss has happened: the command for the survivors drops it
  base.fault.lose_step = 0;
  HERD_ASSIGN_OR_RETURN(const topology::Cluster cluster, train::local_cpu_cluster(cfg.projection.cluster_file));
  planner::SearchSpace space;
  space.reshard_after_forward = cfg.parallel.reshard_after_forward;
  // Every count up to `ranks` ranked together, best first: the first layout the runtime accepts wins.
  HERD_ASSIGN_OR_RETURN(const planner::PlanResult r,
                        planner::plan_up_to(m, cluster, training_spec(base), ranks, space, 100));
  std::string why = r.ranked.empty() && !r.rejected.empty() ? r.rejected.back().reason : "";
  for (const planner::Estimate& e : r.ranked) {
    train::TrainConfig trial = base;
    static_cast<planner::Layout&>(trial.parallel) = planner::with_searched(trial.parallel, e.layout);
    Result<train::JobLayout> ok = train::check_layout(trial, m, e.gpus);
    if (ok.ok()) return ElasticChoice{trial.parallel, e.time.step_s};
    why = ok.error().message();
  }
  return make_error("no layout of ", m.name, " on ", ranks, " rank(s) or fewer fits and keeps train.global_batch (",
                    cfg.train.global_batch, ")", why.empty() ? "" : "; " + why);
}

std::vector<std::string> with_layout(std::vector<std::string> command, const planner::Layout& layout) {
  std::vector<std::string> out;
  const auto train_at = std::find(command.begin(), command.end(), "train");
  const std::size_t first_train_arg = train_at == command.end() ? 0 : (train_at - command.begin()) + 1;
  for (std::size_t i = 0; i < command.size(); ++i) {
    const std::string& a = command[i];
    if (i < first_train_arg) {
      out.push_back(a);
      if ((a == "-np" || a == "-n" || a == "--np") && i + 1 < first_train_arg) {
        out.push_back(std::to_string(layout.gpus()));
        ++i;
      }
      continue;
    }
    bool drop = false, with_value = false;
    for (const char* f : kLayoutFlags) {
      if (a == f) drop = with_value = true;
      if (starts_with(a, (std::string(f) + "=").c_str())) drop = true;
    }
    for (const char* k : kReplacedKeys) drop = drop || starts_with(a, k);
    if (!drop) {
      out.push_back(a);
    } else if (with_value) {
      ++i;
    }
  }
  std::istringstream flags(layout.to_flags());
  for (std::string f; flags >> f;) out.push_back(f);
  return out;
}

std::function<Result<std::vector<std::string>>(std::int64_t)> elastic_replan(const train::TrainConfig& cfg,
                                                                             const model::LlamaConfig& m,
                                                                             std::vector<std::string> command) {
  struct Running {
    train::TrainConfig cfg;
    model::LlamaConfig m;
    std::vector<std::string> command;
    double step_s = 0;   // the planner's step time of the layout running now
    std::string layout;  // that layout, resolved
  };
  auto now = std::make_shared<Running>(Running{cfg, m, std::move(command), 0, cfg.parallel.to_string()});
  if (Result<topology::Cluster> c = train::local_cpu_cluster(cfg.projection.cluster_file); c.ok()) {
    planner::Layout running = cfg.parallel;
    Result<train::JobLayout> checked = train::check_layout(cfg, m, 0);
    if (checked.ok()) running = checked->resolved.layout;
    now->layout = running.to_string();
    running.zero = running.gpus() > 1 ? 3 : 0;
    Result<planner::Estimate> e = planner::estimate(m, *c, training_spec(cfg), running, running.gpus());
    if (e.ok()) now->step_s = e->time.step_s;
  }
  const auto own = std::make_shared<const Running>(*now);  // the job's own layout, to grow back to
  return [now, own](std::int64_t ranks) -> Result<std::vector<std::string>> {
    if (ranks >= own->cfg.parallel.gpus()) {
      log_info("herd supervisor: elastic: ", ranks, " rank(s) available again: ", now->layout, " -> the job's own ",
               own->layout, " (planned ", format_seconds(own->step_s),
               " per step); resuming from the newest checkpoint");
      *now = *own;
      return now->command;
    }
    HERD_ASSIGN_OR_RETURN(const ElasticChoice choice, best_layout_within(now->cfg, now->m, ranks));
    const std::string slowdown =
        now->step_s > 0 ? ", " + format_fixed(choice.step_s / now->step_s, 2) + "x the step time" : "";
    log_info("herd supervisor: elastic: re-planned on ", ranks, " surviving rank(s): ", now->layout, " (planned ",
             format_seconds(now->step_s), " per step) -> ", choice.layout.to_string(), " on ", choice.layout.gpus(),
             " rank(s) (planned ", format_seconds(choice.step_s), " per step", slowdown,
             "); resuming from the newest checkpoint");
    static_cast<planner::Layout&>(now->cfg.parallel) = choice.layout;
    now->step_s = choice.step_s;
    now->layout = choice.layout.to_string();
    now->command = with_layout(own->command, choice.layout);
    return now->command;
  };
}

}  // namespace herd::cli
