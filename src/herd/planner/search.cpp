#include "herd/planner/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>

#include "herd/core/format.h"
#include "herd/core/timer.h"
#include "herd/planner/search_knobs.h"
#include "herd/schedule/schedule.h"

namespace herd::planner {

namespace {

using search::Ctx;
using search::divisors;
using search::Given;
using search::Knob;
using search::knobs;
using search::Stage;
using search::Values;

// Headroom on the quick pass's memory: its in-flight count is the depth-first warm-up bound, and the
// simulator has the last word on every layout that is ranked or chosen.
constexpr double kQuickMemorySlack = 1.10;

// Layer assignments, shared by every family and variant of one search with the same layout fields
// that assign_layers reads: PP, V and the layer split the layout resolves to (auto: from its costs).
class Assignments {
 public:
  explicit Assignments(std::int64_t layers) : layers_(static_cast<int>(layers)) {}
  const Result<schedule::LayerAssignment>& get(const model::LlamaConfig& cfg, const Layout& l, const StepCosts& c) {
    const bool light = resolve_layer_split(cfg, l, c) == LayerSplit::kLightEnds;
    const std::tuple<std::int64_t, int, bool> key{l.pp, l.v, light};
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      it = cache_.emplace(key, schedule::assign_layers(layers_, static_cast<int>(l.pp), l.v, light)).first;
    }
    return it->second;
  }

 private:
  int layers_;
  std::map<std::tuple<std::int64_t, int, bool>, Result<schedule::LayerAssignment>> cache_;
};

// One quick-pass estimate of a variant.
struct Variant {
  Layout layout;
  double step_s = 0;
  double memory_bytes = 0;
  bool fits = false;  // within kQuickMemorySlack of the capacity
};

struct FamilyScan {
  std::vector<Variant> variants;  // enumeration order; only those that fit unless keep_all
  std::int64_t costed = 0, fitting = 0, pruned = 0;
  double least = std::numeric_limits<double>::infinity();
  std::string least_layout, last_error;
};

// The family's work per pipeline rank on average: no pipeline rank does less than the busiest, and the
// quick pass's step time is the busiest rank's work plus terms that are never negative.
double mean_rank_work_s(const model::LlamaConfig& cfg, const StepCosts& c, const Layout& l, const TrainingSpec& t) {
  const double per_mb = static_cast<double>(cfg.n_layers) * (c.layer.fwd() + c.layer.bwd()) + c.embedding.fwd() +
                        c.embedding.bwd() + c.output.fwd() + c.output.bwd();
  return static_cast<double>(l.microbatches(t)) * per_mb / static_cast<double>(l.pp);
}

// The quick pass's step time is at least the busiest pipeline rank's work plus its closed-form
// bubble, busy x (pp - 1) / (V M) (estimate.cpp, pipeline_time): a family's variants take at least
// their mean rank work times this factor, at the largest V they may use (pp x V <= layers + 2) and
// their M. Ranks that time-slice a CPU host's cores give the bubble's cores away (share_host_cores):
// there the bound is the work alone.
double bubble_factor(const Ctx& c, std::int64_t gpus, std::int64_t pp, double microbatches) {
  if (pp == 1 || topology::host_oversubscription(c.cluster.accelerator, gpus) > 1.0) return 1.0;
  const double v =
      c.space.v ? static_cast<double>(*c.space.v) : std::floor(static_cast<double>(c.cfg.n_layers + 2) / pp);
  return 1.0 + static_cast<double>(pp - 1) / (std::max(1.0, v) * microbatches);
}

// A combination of the kCosts knobs that passes validate_layout, with its step costs and a lower
// bound on the quick pass's step time of every variant built on it.
struct Outer {
  Layout layout;
  StepCosts costs;
  double bound_s;
};

struct FamilyCosts {
  std::vector<Outer> outers;  // cheapest bound first (ties in enumeration order)
  std::string last_error;
  double bound_s() const { return outers.empty() ? std::numeric_limits<double>::infinity() : outers.front().bound_s; }
};

FamilyCosts family_costs(const Ctx& c, const Layout& base) {
  FamilyCosts out;
  std::vector<const Knob*> cost_knobs;
  for (const Knob& k : knobs()) {
    if (k.stage == Stage::kCosts) cost_knobs.push_back(&k);
  }
  Layout l = base;
  combinations(c, cost_knobs, 0, l, [&](const Layout& x) {
    if (Status s = validate_layout(c.cfg, c.cluster, c.train, x, c.gpus); !s.ok()) {
      out.last_error = s.error().message();
      return;
    }
    Result<StepCosts> costs = step_costs(c.cfg, c.cluster, c.train, x);
    if (!costs.ok()) {
      out.last_error = costs.error().message();
      return;
    }
    const double bound = mean_rank_work_s(c.cfg, *costs, x, c.train) *
                         bubble_factor(c, c.gpus, x.pp, static_cast<double>(x.microbatches(c.train)));
    out.outers.push_back({x, std::move(*costs), bound});
  });
  std::stable_sort(out.outers.begin(), out.outers.end(),
                   [](const Outer& a, const Outer& b) { return a.bound_s < b.bound_s; });
  return out;
}

enum class ScanMode {
  kAll,           // every variant
  kPrune,         // skip variants the bound shows cannot be among the family's kFamilySimulated best
  kUntilOneFits,  // stop at the first variant that fits (the family cannot be ranked; is it rejected?)
};

// The family's variants by the quick pass, over the kSchedule knobs of each of its outers.
FamilyScan scan_family(const Ctx& c, const FamilyCosts& fc, bool keep_all, ScanMode mode, Assignments& assignments) {
  FamilyScan out;
  out.last_error = fc.last_error;
  std::vector<const Knob*> schedule_knobs;
  for (const Knob& k : knobs()) {
    if (k.stage == Stage::kSchedule) schedule_knobs.push_back(&k);
  }
  const double capacity = c.cluster.memory_bytes();
  std::priority_queue<double> best;  // the family's kFamilySimulated best fitting times (max on top)
  // To learn whether anything fits, the leanest first: most recompute, smallest micro-batches,
  // sequence parallelism on.
  std::vector<const Outer*> order;
  for (const Outer& o : fc.outers) order.push_back(&o);
  if (mode == ScanMode::kUntilOneFits) {
    std::stable_sort(order.begin(), order.end(), [](const Outer* a, const Outer* b) {
      return std::make_tuple(-static_cast<int>(a->layout.recompute), a->layout.microbatch, !a->layout.sp()) <
             std::make_tuple(-static_cast<int>(b->layout.recompute), b->layout.microbatch, !b->layout.sp());
    });
  }
  for (const Outer* op : order) {
    const Outer& o = *op;
    if (mode == ScanMode::kUntilOneFits && out.fitting > 0) break;
    Layout y = o.layout;
    combinations(c, schedule_knobs, 0, y, [&](const Layout& x) {
      if (mode == ScanMode::kUntilOneFits && out.fitting > 0) return;
      const Result<schedule::LayerAssignment>& assign = assignments.get(c.cfg, x, o.costs);
      if (!assign.ok()) {
        out.last_error = assign.error().message();
        return;
      }
      if (mode == ScanMode::kPrune && static_cast<int>(best.size()) == kFamilySimulated &&
          o.bound_s * (1 - 1e-9) > best.top()) {
        ++out.pruned;
        return;
      }
      EstimateOptions quick;
      quick.simulate = false;
      quick.assignment = &*assign;
      Result<Estimate> e = estimate_from_costs(c.cfg, c.cluster, c.train, x, c.gpus, o.costs, quick);
      if (!e.ok()) {
        out.last_error = e.error().message();
        return;
      }
      ++out.costed;
      const double mem = e->memory.total_bytes;
      if (mem < out.least) out.least = mem, out.least_layout = x.to_string();
      const bool fits = mem <= capacity * kQuickMemorySlack;
      if (fits) {
        ++out.fitting;
        best.push(e->time.step_s);
        if (static_cast<int>(best.size()) > kFamilySimulated) best.pop();
      }
      if (fits || keep_all) out.variants.push_back({x, e->time.step_s, mem, fits});
    });
  }
  return out;
}

// The variants that fit, fastest first by the quick pass (ties in enumeration order).
std::vector<const Variant*> fitting_by_time(const std::vector<Variant>& variants) {
  std::vector<const Variant*> f;
  for (const Variant& v : variants) {
    if (v.fits) f.push_back(&v);
  }
  std::stable_sort(f.begin(), f.end(), [](const Variant* a, const Variant* b) { return a->step_s < b->step_s; });
  return f;
}

// Simulated estimates, each layout once (on the accelerators its degrees multiply to).
class Simulations {
 public:
  explicit Simulations(const Ctx& c) : c_(c) {}
  const Result<Estimate>& get(const Layout& l) {
    const std::string key = l.to_string();
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      ++count;
      it = cache_.emplace(key, estimate(c_.cfg, c_.cluster, c_.train, l, l.gpus())).first;
    }
    return it->second;
  }
  // The fastest of `order`'s first `limit` that fits when simulated; with `past_limit`, keeps going
  // down the list until one fits.
  std::optional<Estimate> fastest(const std::vector<const Variant*>& order, std::size_t limit, bool past_limit) {
    std::optional<Estimate> best;
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i >= limit && (best || !past_limit)) break;
      const Result<Estimate>& e = get(order[i]->layout);
      if (e.ok() && e->fits() && (!best || e->time.step_s < best->time.step_s)) best = *e;
    }
    return best;
  }
  std::int64_t count = 0;

 private:
  const Ctx& c_;
  std::map<std::string, Result<Estimate>> cache_;
};

// The families whose best quick-pass time is among the n best so far, kept for simulation.
class Ranking {
 public:
  explicit Ranking(std::size_t n) : n_(n) {}
  // Whether a family whose step time is at least `bound_s` cannot be among the n best.
  bool out_of_reach(double bound_s) const { return best_.size() == n_ && bound_s * (1 - 1e-9) > best_.top(); }
  // A family's variants that fit (not empty).
  void add(std::vector<Variant> variants) {
    double best_s = std::numeric_limits<double>::infinity();
    for (const Variant& v : variants) best_s = std::min(best_s, v.step_s);
    best_.push(best_s);
    if (best_.size() > n_) best_.pop();
    families_.push_back({std::move(variants), best_s});
  }
  // The n families with the best quick-pass times each choose their layout as `herd estimate` does
  // (the simulator over their best variants); those layouts by simulated step time, at most top_k.
  std::vector<Estimate> simulate(Simulations& sims, int top_k) {
    std::stable_sort(families_.begin(), families_.end(),
                     [](const Family& a, const Family& b) { return a.best_s < b.best_s; });
    std::vector<Estimate> ranked;
    for (std::size_t i = 0; i < std::min(n_, families_.size()); ++i) {
      std::optional<Estimate> e = sims.fastest(fitting_by_time(families_[i].variants), kFamilySimulated, false);
      if (e) ranked.push_back(std::move(*e));
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const Estimate& a, const Estimate& b) { return a.time.step_s < b.time.step_s; });
    if (ranked.size() > static_cast<std::size_t>(top_k)) ranked.resize(static_cast<std::size_t>(top_k));
    return ranked;
  }

 private:
  struct Family {
    std::vector<Variant> variants;  // those that fit (quick pass)
    double best_s;
  };
  std::size_t n_;
  std::priority_queue<double> best_;  // the n best family times (max on top)
  std::vector<Family> families_;
};

// Families simulated for a plan of top_k rows.
std::size_t simulated_families(int top_k) { return static_cast<std::size_t>(std::max(2 * top_k, 12)); }

// The weakest form of a family of degrees, as plan() validates it: sequence parallelism (when
// searched) only narrows the shapes.
Layout family_base(const SearchSpace& space, std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp) {
  Layout base;
  base.tp = tp, base.cp = cp, base.pp = pp, base.dp = dp;
  base.sequence_parallel = space.sequence_parallel.value_or(false);
  base.zero = space.zero;
  base.reshard_after_forward = space.reshard_after_forward;
  base.layer_split = space.layer_split;
  base.microbatch = space.microbatch.value_or(1);
  base.v = 1;
  return base;
}

std::string percent_slower(double s, double best) {
  const double d = 100.0 * (s / best - 1.0);
  return (d >= 0 ? "+" : "") + format_fixed(d, 1) + "%";
}

// Why the family's layout has this value of `k`: the best layout with another value (simulated) and
// what it gives up, or that nothing with another value fits.
KnobChoice explain(const Knob& k, const Estimate& best, const std::vector<Variant>& variants, Simulations& sims,
                   const SearchSpace& space) {
  KnobChoice out;
  out.knob = k.name;
  out.flag = k.flag;
  out.type = k.type;
  const std::int64_t value = k.get(best.layout);
  out.value = k.text(value);
  out.given = k.given(space).has_value();
  if (out.given) {
    out.why = std::string("given (") + k.flag + ")";
    return out;
  }
  std::vector<Variant> others;
  for (const Variant& v : variants) {
    if (k.get(v.layout) != value) others.push_back(v);
  }
  if (others.empty()) {
    out.why = "the only value these degrees allow";
    return out;
  }
  if (!best.fits()) {
    out.why = "nothing fits; the leanest variant has it";
    return out;
  }
  std::set<std::int64_t> unfit_values;
  for (const Variant& v : others) unfit_values.insert(k.get(v.layout));
  for (const Variant& v : others) {
    if (v.fits) unfit_values.erase(k.get(v.layout));
  }
  std::string unfit;
  for (std::int64_t x : unfit_values) unfit += (unfit.empty() ? "" : ", ") + k.text(x);
  const std::optional<Estimate> alt = sims.fastest(fitting_by_time(others), kFamilySimulated, true);
  const double capacity = best.memory.capacity_bytes;
  if (alt) {
    out.runner_up = KnobChoice::Alternative{k.text(k.get(alt->layout)), alt->layout, alt->time.step_s,
                                            alt->memory.total_bytes, true};
    out.why = "fastest; the best with another value, " + std::string(k.flag) + " " + out.runner_up->value + " (" +
              alt->layout.to_string() + "), takes " + format_fixed(alt->time.step_s, 3) + " s (" +
              percent_slower(alt->time.step_s, best.time.step_s) + ") in " + format_bytes(alt->memory.total_bytes);
    if (!unfit.empty()) out.why += "; nothing fits with " + std::string(k.flag) + " " + unfit;
    return out;
  }
  // No other value fits: the leanest of them (by the quick pass), simulated for its memory.
  const Variant* lean = &others.front();
  for (const Variant& v : others) {
    if (v.memory_bytes < lean->memory_bytes) lean = &v;
  }
  const Result<Estimate>& e = sims.get(lean->layout);
  const double need = e.ok() ? e->memory.total_bytes : lean->memory_bytes;
  out.runner_up =
      KnobChoice::Alternative{k.text(k.get(lean->layout)), lean->layout, e.ok() ? e->time.step_s : 0, need, false};
  out.why = "fits only with " + std::string(k.flag) + " " + out.value + ": the leanest with another value, " +
            std::string(k.flag) + " " + out.runner_up->value + " (" + lean->layout.to_string() + "), needs " +
            format_bytes(need) + " of " + format_bytes(capacity);
  return out;
}

bool any_given(const SearchSpace& s) {
  for (const Knob& k : knobs()) {
    if (k.given(s)) return true;
  }
  return false;
}

Result<FamilyChoice> choose(const Ctx& c, const Layout& degrees, bool hints) {
  const SearchSpace& space = c.space;
  Layout base;
  base.tp = degrees.tp, base.cp = degrees.cp, base.pp = degrees.pp, base.dp = degrees.dp;
  base.zero = space.zero;
  base.reshard_after_forward = space.reshard_after_forward;
  base.layer_split = space.layer_split;
  Assignments assignments(c.cfg.n_layers);
  FamilyScan scan = scan_family(c, family_costs(c, base), /*keep_all=*/true, ScanMode::kAll, assignments);
  if (scan.variants.empty()) {
    // The layout as given, every other knob at its default: the constraint it breaks, worded once.
    Layout as_given = base;
    for (const Knob& k : knobs()) {
      if (Given g = k.given(space)) k.set(as_given, *g);
    }
    HERD_RETURN_IF_ERROR(validate_layout(c.cfg, c.cluster, c.train, as_given, c.gpus));
    return make_error(scan.last_error.empty() ? "no layout of these degrees and knobs" : scan.last_error);
  }
  FamilyChoice out;
  out.variants = scan.costed;
  out.fitting = scan.fitting;
  Simulations sims(c);
  std::optional<Estimate> best = sims.fastest(fitting_by_time(scan.variants), kFamilySimulated, true);
  if (!best) {
    // Nothing fits: the leanest variants (by the quick pass), simulated; the least memory wins.
    std::vector<const Variant*> lean;
    for (const Variant& v : scan.variants) lean.push_back(&v);
    std::stable_sort(lean.begin(), lean.end(),
                     [](const Variant* a, const Variant* b) { return a->memory_bytes < b->memory_bytes; });
    for (std::size_t i = 0; i < lean.size() && i < static_cast<std::size_t>(kFamilySimulated); ++i) {
      const Result<Estimate>& e = sims.get(lean[i]->layout);
      if (e.ok() && (!best || e->memory.total_bytes < best->memory.total_bytes)) best = *e;
    }
    if (!best)
      return make_error(scan.last_error.empty() ? "no layout of these degrees could be simulated" : scan.last_error);
  }
  // A knob's runner-up is simulated; should one be faster than the choice (the quick pass ranked it
  // lower), it becomes the choice and every knob is explained again (at most 3 times).
  for (int round = 0;; ++round) {
    out.knobs.clear();
    std::optional<Estimate> faster;
    for (const Knob& k : knobs()) {
      out.knobs.push_back(explain(k, *best, scan.variants, sims, space));
      const auto& r = out.knobs.back().runner_up;
      if (r && r->fits && r->step_s < best->time.step_s && (!faster || r->step_s < faster->time.step_s)) {
        faster = *sims.get(r->layout);
      }
    }
    if (!faster || round == 3) break;
    best = std::move(faster);
  }
  out.best = std::move(*best);
  out.simulated = sims.count;
  if (!out.best.fits() && hints) {
    const double need = out.best.memory.total_bytes, capacity = out.best.memory.capacity_bytes;
    std::string hint = "the leanest variant needs " + format_bytes(need) + " per accelerator, " +
                       format_bytes(capacity) + " available";
    if (any_given(space)) {
      SearchSpace open;
      open.zero = space.zero;
      open.reshard_after_forward = space.reshard_after_forward;
      open.max_microbatch = space.max_microbatch;
      const Ctx oc{c.cfg, c.cluster, c.train, c.gpus, open};
      Result<FamilyChoice> free = choose(oc, degrees, false);
      if (free.ok() && free->best.fits()) {
        hint += "; it fits with the knobs left to the search: " + free->best.layout.to_flags();
      }
    }
    Result<PlanResult> p = plan(c.cfg, c.cluster, c.train, c.gpus, space, 1);
    if (p.ok() && !p->ranked.empty()) {
      const Layout& l = p->ranked.front().layout;
      hint += "; other degrees of these " + std::to_string(c.gpus) + " accelerators fit, e.g. herd plan's best: --tp " +
              std::to_string(l.tp) + " --cp " + std::to_string(l.cp) + " --pp " + std::to_string(l.pp) + " --dp " +
              std::to_string(l.dp) + " (" + format_bytes(p->ranked.front().memory.total_bytes) + ")";
    }
    hint += "; accelerators with at least " + format_bytes(need) + " of memory would hold it";
    out.to_fit = hint;
  }
  return out;
}

}  // namespace

Layout with_searched(const Layout& run, const Layout& chosen) {
  Layout l = run;
  l.tp = chosen.tp;
  l.cp = chosen.cp;
  l.pp = chosen.pp;
  l.dp = chosen.dp;
  for (const Knob& k : knobs()) k.set(l, k.get(chosen));
  return l;
}

Result<FamilyChoice> choose_layout(const model::LlamaConfig& cfg, const topology::Cluster& cluster,
                                   const TrainingSpec& train, const Layout& degrees, std::int64_t gpus,
                                   const SearchSpace& space) {
  const Ctx c{cfg, cluster, train, gpus, space};
  return choose(c, degrees, true);
}

Result<PlanResult> plan(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                        std::int64_t gpus, const SearchSpace& space, int top_k) {
  const Timer timer;
  if (gpus > cluster.max_accelerators()) {
    return make_error("--gpus (", gpus, ") exceeds cluster ", cluster.name, " (", cluster.max_accelerators(),
                      " accelerators)");
  }
  if (top_k < 1) return make_error("--top (", top_k, ") must be at least 1");
  const Ctx c{cfg, cluster, train, gpus, space};
  PlanResult out;
  const double capacity = cluster.memory_bytes();
  Assignments assignments(cfg.n_layers);
  // Every family that passes the checks, with its step costs (and so its step-time bound).
  struct Pending {
    Rejection degrees;
    FamilyCosts costs;
  };
  std::vector<Pending> pending;
  for (std::int64_t tp : divisors(gpus)) {
    for (std::int64_t cp : divisors(gpus / tp)) {
      for (std::int64_t pp : divisors(gpus / (tp * cp))) {
        const std::int64_t dp = gpus / (tp * cp * pp);
        ++out.families;
        const Layout base = family_base(space, tp, cp, pp, dp);
        if (Status s = validate_layout(cfg, cluster, train, base, gpus); !s.ok()) {
          out.rejected.push_back({tp, cp, pp, dp, s.error().message()});
          continue;
        }
        pending.push_back({{tp, cp, pp, dp, ""}, family_costs(c, base)});
      }
    }
  }
  // Families in order of their bound. Only the simulated_families with the best quick-pass times are
  // simulated: once that many have a best time below a family's bound, that family cannot be one of
  // them, and all that is left to learn is whether anything fits (else it is rejected, with its
  // leanest variant).
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return a.costs.bound_s() < b.costs.bound_s(); });
  Ranking ranking(simulated_families(top_k));
  for (Pending& f : pending) {
    const bool out_of_reach = space.prune && ranking.out_of_reach(f.costs.bound_s());
    FamilyScan scan = scan_family(c, f.costs, /*keep_all=*/false,
                                  out_of_reach  ? ScanMode::kUntilOneFits
                                  : space.prune ? ScanMode::kPrune
                                                : ScanMode::kAll,
                                  assignments);
    out.layouts_costed += scan.costed;
    out.layouts_fitting += scan.fitting;
    out.layouts_pruned += scan.pruned;
    Rejection& d = f.degrees;
    if (scan.fitting == 0) {
      d.reason = scan.least < std::numeric_limits<double>::infinity()
                     ? "out of memory: the leanest variant (" + scan.least_layout + ") needs " +
                           format_bytes(scan.least) + " per accelerator, " + format_bytes(capacity) + " available"
                     : scan.last_error;
      out.rejected.push_back(d);
      continue;
    }
    if (!out_of_reach) ranking.add(std::move(scan.variants));
  }
  std::stable_sort(out.rejected.begin(), out.rejected.end(), [](const Rejection& a, const Rejection& b) {
    return std::tie(a.tp, a.cp, a.pp) < std::tie(b.tp, b.cp, b.pp);
  });
  Simulations sims(c);
  out.ranked = ranking.simulate(sims, top_k);
  out.layouts_simulated = sims.count;
  out.search_s = timer.seconds();
  return out;
}

Result<PlanResult> plan_up_to(const model::LlamaConfig& cfg, const topology::Cluster& cluster,
                              const TrainingSpec& train, std::int64_t max_gpus, const SearchSpace& space, int top_k) {
  const Timer timer;
  if (max_gpus < 1) return make_error("accelerators (", max_gpus, ") must be at least 1");
  if (max_gpus > cluster.max_accelerators()) {
    return make_error("--gpus (", max_gpus, ") exceeds cluster ", cluster.name, " (", cluster.max_accelerators(),
                      " accelerators)");
  }
  if (top_k < 1) return make_error("--top (", top_k, ") must be at least 1");
  PlanResult out;
  // Each degree's values that pass the checks with the other three at 1: a family fails when any
  // of its degrees does (the checks only tighten as degrees combine).
  auto alone = [&](int which) {
    std::vector<std::int64_t> ok;
    for (std::int64_t x = 1; x <= max_gpus; ++x) {
      std::int64_t d[4] = {1, 1, 1, 1};
      d[which] = x;
      if (validate_layout(cfg, cluster, train, family_base(space, d[0], d[1], d[2], d[3]), x).ok()) ok.push_back(x);
    }
    return ok;
  };
  const std::vector<std::int64_t> tps = alone(0), cps = alone(1), pps = alone(2), dps = alone(3);
  // A lower bound on each family's step-time bound, its pipeline ranks' mean work (M x the work of a
  // micro-batch / pp = B x the work of a sequence / (dp x pp)) times its bubble factor at the most
  // micro-batches it may run. The layer, embedding and output costs depend on tp, cp and the cost
  // knobs, not on pp and dp (on a CPU host, which shares its cores among the ranks, a job of tp x cp
  // ranks is faster than one of more), so the family of the same (tp, cp) on tp x cp accelerators
  // bounds the work of every family of that (tp, cp) by its bound / (pp x dp).
  struct Candidate {
    std::int64_t tp, cp, pp, dp;
    double lower_s;
  };
  std::vector<Candidate> candidates;
  for (std::int64_t tp : tps) {
    for (std::int64_t cp : cps) {
      if (tp * cp > max_gpus) break;
      double per_sequence_s = 0;
      if (space.prune) {
        const Ctx one{cfg, cluster, train, tp * cp, space};
        per_sequence_s = family_costs(one, family_base(space, tp, cp, 1, 1)).bound_s();
        if (!std::isfinite(per_sequence_s)) continue;  // no family of this (tp, cp) passes the checks
      }
      for (std::int64_t pp : pps) {
        if (tp * cp * pp > max_gpus) break;
        for (std::int64_t dp : dps) {
          const std::int64_t gpus = tp * cp * pp * dp;
          if (gpus > max_gpus) break;
          if (!validate_layout(cfg, cluster, train, family_base(space, tp, cp, pp, dp), gpus).ok()) continue;
          const double most_microbatches =
              static_cast<double>(train.global_batch) / static_cast<double>(dp * space.microbatch.value_or(1));
          const Ctx c{cfg, cluster, train, gpus, space};
          candidates.push_back(
              {tp, cp, pp, dp,
               per_sequence_s / static_cast<double>(pp * dp) * bubble_factor(c, gpus, pp, most_microbatches)});
        }
      }
    }
  }
  out.families = static_cast<std::int64_t>(candidates.size());
  // Best first, as plan() scans its families in the order of their bounds: the next family is the
  // one with the least bound, its lower bound until its costs are known and its own after. A family
  // whose bound is out of reach ends the search: every other's is at least as high.
  struct Next {
    double bound_s;
    std::size_t candidate;
    bool costed;
    bool operator<(const Next& o) const {
      return std::tie(o.bound_s, o.candidate, o.costed) < std::tie(bound_s, candidate, costed);  // least on top
    }
  };
  std::priority_queue<Next> next;
  for (std::size_t i = 0; i < candidates.size(); ++i) next.push({candidates[i].lower_s, i, false});
  std::vector<FamilyCosts> costs(candidates.size());
  Assignments assignments(cfg.n_layers);
  Ranking ranking(simulated_families(top_k));
  while (!next.empty()) {
    const Next n = next.top();
    next.pop();
    if (space.prune && ranking.out_of_reach(n.bound_s)) break;
    const Candidate& f = candidates[n.candidate];
    const Ctx c{cfg, cluster, train, f.tp * f.cp * f.pp * f.dp, space};
    if (!n.costed) {
      costs[n.candidate] = family_costs(c, family_base(space, f.tp, f.cp, f.pp, f.dp));
      next.push({costs[n.candidate].bound_s(), n.candidate, true});
      continue;
    }
    FamilyScan scan = scan_family(c, costs[n.candidate], /*keep_all=*/false,
                                  space.prune ? ScanMode::kPrune : ScanMode::kAll, assignments);
    costs[n.candidate] = FamilyCosts{};  // scanned: its step costs are no longer needed
    out.layouts_costed += scan.costed;
    out.layouts_fitting += scan.fitting;
    out.layouts_pruned += scan.pruned;
    if (scan.fitting > 0) ranking.add(std::move(scan.variants));
  }
  const Ctx c{cfg, cluster, train, max_gpus, space};
  Simulations sims(c);
  out.ranked = ranking.simulate(sims, top_k);
  out.layouts_simulated = sims.count;
  out.search_s = timer.seconds();
  return out;
}

}  // namespace herd::planner
