// `herd plan`: every valid layout for a model, cluster, GPU count and batch, ranked by step time.
//
// The degrees (tp, cp, pp, dp) are always searched; V, micro-batch size, N and recompute are searched
// unless fixed; sequence parallelism, the ZeRO stage and resharding are taken as given. Families
// (one choice of degrees) that cannot run are reported with the first constraint they break, or with
// the least memory any of their variants needs when none fits.
//
// Speed (405B on 16,384 GPUs in well under 2 s on 2 cores): divisibility prunes first; step costs
// are computed once per (degrees, micro-batch size, recompute) and shared by every V and N; a quick
// analytic pass (EstimateOptions::simulate = false) ranks and filters by memory; only the best
// candidates are simulated, and the final ranking is by simulated step time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "herd/planner/estimate.h"

namespace herd::planner {

struct SearchSpace {
  std::optional<int> v;
  std::optional<std::int64_t> microbatch;
  std::optional<int> n;
  std::optional<model::Recompute> recompute;
  bool sequence_parallel = true;
  int zero = 3;
  bool reshard_after_forward = false;
  LayerSplit layer_split = LayerSplit::kAuto;  // auto: resolved per layout (planner::resolve_layer_split)
  std::int64_t max_microbatch = 16;            // micro-batch sizes searched: divisors of B/dp up to this
};

struct Rejection {
  std::int64_t tp = 1, cp = 1, pp = 1, dp = 1;
  std::string reason;
};

struct PlanResult {
  std::vector<Estimate> ranked;      // best first, one per family of degrees, at most top_k
  std::int64_t families = 0;         // (tp, cp, pp, dp) combinations with the right product
  std::int64_t layouts_costed = 0;   // quick-pass estimates
  std::int64_t layouts_fitting = 0;  // of those, fitting in memory
  std::int64_t layouts_simulated = 0;
  std::vector<Rejection> rejected;
  double search_s = 0;
};

Result<PlanResult> plan(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                        std::int64_t gpus, const SearchSpace& space, int top_k);

}  // namespace herd::planner
