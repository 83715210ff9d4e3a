// The planner's search: `herd plan` over every family of degrees, and `herd estimate` within one.
//
// A family is one choice of degrees (tp, cp, pp, dp). Within it the knobs (micro-batch size,
// recompute, sequence parallelism, V, N) are searched unless fixed; the ZeRO stage and resharding
// are taken as given. Both commands run the same family search: every variant is costed by the quick
// analytic pass (EstimateOptions::simulate = false), those within memory are ordered by its step
// time, and the family's best kFamilySimulated are simulated; the fastest that fits is the family's
// layout. `plan` does this for the families with the best quick-pass times and ranks them; `estimate`
// does it for the degrees it is given and says, knob by knob, what it chose and why.
//
// Speed: divisibility prunes first; step costs are computed once per (degrees, micro-batch size,
// recompute, sequence parallelism) and shared by every V and N; layer assignments are shared by
// every family with the same (PP, V); a variant whose step-time lower bound (its pipeline rank's mean
// work) already exceeds the family's kFamilySimulated-th best is not costed (it could not be
// simulated). Families that cannot run are reported with the first constraint they break, or with
// the least memory any of their variants needs when none fits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "herd/planner/estimate.h"

namespace herd::planner {

// Quick-pass variants of one family that are simulated to choose its layout.
inline constexpr int kFamilySimulated = 8;

struct SearchSpace {
  std::optional<int> v;
  std::optional<std::int64_t> microbatch;
  std::optional<int> n;
  std::optional<model::Recompute> recompute;
  std::optional<bool> sequence_parallel;  // not given: true and false are searched when tp > 1
  int zero = 3;
  bool reshard_after_forward = false;
  LayerSplit layer_split = LayerSplit::kAuto;  // auto: resolved per layout (planner::resolve_layer_split)
  std::int64_t max_microbatch = 16;            // micro-batch sizes searched: divisors of B/dp up to this
  // Skip quick-pass estimates that a lower bound shows cannot be among their family's simulated
  // variants. false: cost every variant (the test that pruning changes nothing compares the two).
  bool prune = true;
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
  std::int64_t layouts_pruned = 0;   // skipped by the step-time bound
  std::int64_t layouts_simulated = 0;
  std::vector<Rejection> rejected;
  double search_s = 0;
};

Result<PlanResult> plan(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                        std::int64_t gpus, const SearchSpace& space, int top_k);

// plan() over every accelerator count up to `max_gpus` at once: the families of degrees whose product
// is at most max_gpus, ranked together by step time (each Estimate's `gpus` is its count). What a job
// that lost accelerators can run with its global batch (reliability.h, elastic recovery). Families
// are costed in the order of a lower bound on their step time, so that those no faster than the best
// found are not costed; `families` counts those that pass the checks, and none is listed as rejected.
Result<PlanResult> plan_up_to(const model::LlamaConfig& cfg, const topology::Cluster& cluster,
                              const TrainingSpec& train, std::int64_t max_gpus, const SearchSpace& space, int top_k);

// How the family search settled one knob for `herd estimate`.
struct KnobChoice {
  enum class Type { kInteger, kBoolean, kName };
  std::string knob;   // the layout JSON key: "v", "microbatch_size", "n", "recompute", "sequence_parallel"
  std::string flag;   // "--v"
  std::string value;  // as the flag takes it
  Type type = Type::kInteger;
  bool given = false;
  std::string why;
  // The best layout of the family with another value of this knob (simulated), when one exists.
  struct Alternative {
    std::string value;
    Layout layout;
    double step_s = 0;
    double memory_bytes = 0;
    bool fits = false;
  };
  std::optional<Alternative> runner_up;
};

struct FamilyChoice {
  // The chosen layout, simulated. When no variant fits: the leanest one (fits() is false).
  Estimate best;
  std::vector<KnobChoice> knobs;  // every knob, given or chosen, in the search's order
  std::int64_t variants = 0;      // quick-pass estimates of the family
  std::int64_t fitting = 0;       // of those, within memory
  std::int64_t simulated = 0;
  std::string to_fit;  // when nothing fits: what would make it fit
};

// `run` with the degrees and every knob the search sets (search_knobs.h) taken from `chosen`; run's
// other fields (the ZeRO stage, resharding, layer split and schedule) stay: what `--layout auto`
// trains.
Layout with_searched(const Layout& run, const Layout& chosen);

// The layout of the degrees in `degrees` (tp, cp, pp, dp) with every knob `space` leaves open chosen
// by the family search above (`space` fixes the rest, and the ZeRO stage and resharding). Errors:
// the degrees or a given knob break a constraint (the first one, as validate_layout words it).
Result<FamilyChoice> choose_layout(const model::LlamaConfig& cfg, const topology::Cluster& cluster,
                                   const TrainingSpec& train, const Layout& degrees, std::int64_t gpus,
                                   const SearchSpace& space);

}  // namespace herd::planner
