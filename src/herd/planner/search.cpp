#include "herd/planner/search.h"

#include <algorithm>
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
    const double bound = mean_rank_work_s(c.cfg, *costs, x, c.train);
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

// Simulated estimates, each layout once.
class Simulations {
 public:
  explicit Simulations(const Ctx& c) : c_(c) {}
  const Result<Estimate>& get(const Layout& l) {
    const std::string key = l.to_string();
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      ++count;
      it = cache_.emplace(key, estimate(c_.cfg, c_.cluster, c_.train, l, c_.gpus)).first;
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
        // The family's weakest form: sequence parallelism (when searched) only narrows the shapes.
        Layout base;
        base.tp = tp, base.cp = cp, base.pp = pp, base.dp = dp;
        base.sequence_parallel = space.sequence_parallel.value_or(false);
        base.zero = space.zero;
        base.reshard_after_forward = space.reshard_after_forward;
        base.layer_split = space.layer_split;
        base.microbatch = space.microbatch.value_or(1);
        base.v = 1;
        if (Status s = validate_layout(cfg, cluster, train, base, gpus); !s.ok()) {
          out.rejected.push_back({tp, cp, pp, dp, s.error().message()});
          continue;
        }
        pending.push_back({{tp, cp, pp, dp, ""}, family_costs(c, base)});
      }
    }
  }
  // Families in order of their bound. Only the n_families with the best quick-pass times are
  // simulated: once n_families have a best time below a family's bound, that family cannot be one of
  // them, and all that is left to learn is whether anything fits (else it is rejected, with its
  // leanest variant).
  const std::size_t n_families = static_cast<std::size_t>(std::max(2 * top_k, 12));
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return a.costs.bound_s() < b.costs.bound_s(); });
  struct Family {
    std::vector<Variant> variants;  // those that fit (quick pass)
    double best_s;
  };
  std::vector<Family> families;
  std::priority_queue<double> best_families;  // the n_families best family times (max on top)
  for (Pending& f : pending) {
    const bool out_of_reach =
        space.prune && best_families.size() == n_families && f.costs.bound_s() * (1 - 1e-9) > best_families.top();
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
    if (out_of_reach) continue;
    double best_s = std::numeric_limits<double>::infinity();
    for (const Variant& v : scan.variants) best_s = std::min(best_s, v.step_s);
    best_families.push(best_s);
    if (best_families.size() > n_families) best_families.pop();
    families.push_back({std::move(scan.variants), best_s});
  }
  std::stable_sort(out.rejected.begin(), out.rejected.end(), [](const Rejection& a, const Rejection& b) {
    return std::tie(a.tp, a.cp, a.pp) < std::tie(b.tp, b.cp, b.pp);
  });

  // The families with the best quick-pass times each choose their layout as `herd estimate` does (the
  // simulator over their best variants); the rows are those layouts by simulated step time.
  std::stable_sort(families.begin(), families.end(),
                   [](const Family& a, const Family& b) { return a.best_s < b.best_s; });
  Simulations sims(c);
  for (std::size_t i = 0; i < std::min(n_families, families.size()); ++i) {
    std::optional<Estimate> e = sims.fastest(fitting_by_time(families[i].variants), kFamilySimulated, false);
    if (e) out.ranked.push_back(std::move(*e));
  }
  out.layouts_simulated = sims.count;
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [](const Estimate& a, const Estimate& b) { return a.time.step_s < b.time.step_s; });
  if (out.ranked.size() > static_cast<std::size_t>(top_k)) out.ranked.resize(static_cast<std::size_t>(top_k));
  out.search_s = timer.seconds();
  return out;
}

}  // namespace herd::planner
