#include "herd/planner/search.h"

#include <algorithm>
#include <limits>

#include "herd/core/format.h"
#include "herd/core/timer.h"
#include "herd/schedule/schedule.h"

namespace herd::planner {

namespace {

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> d;
  for (std::int64_t i = 1; i * i <= n; ++i) {
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i) d.push_back(n / i);
    }
  }
  std::sort(d.begin(), d.end());
  return d;
}

// V candidates: powers of two, and the V that gives every virtual stage the same number of slots
// (layers + embedding + output), which is how Llama 3 405B fills PP*V = 128 stages.
std::vector<int> v_candidates(std::int64_t layers, std::int64_t pp) {
  if (pp == 1) return {1};
  std::vector<int> vs;
  for (int v = 1; pp * v <= layers + 2; v *= 2) vs.push_back(v);
  if ((layers + 2) % pp == 0) vs.push_back(static_cast<int>((layers + 2) / pp));
  if (layers % pp == 0 && layers / pp > 1) vs.push_back(static_cast<int>(layers / pp));
  std::sort(vs.begin(), vs.end());
  vs.erase(std::unique(vs.begin(), vs.end()), vs.end());
  return vs;
}

struct Candidate {
  Layout layout;
  double step_s;
};

// Headroom on the quick pass's memory: its in-flight count is the depth-first warm-up bound, and the
// simulator has the last word on every layout that is ranked.
constexpr double kQuickMemorySlack = 1.10;

}  // namespace

Result<PlanResult> plan(const model::LlamaConfig& cfg, const topology::Cluster& cluster, const TrainingSpec& train,
                        std::int64_t gpus, const SearchSpace& space, int top_k) {
  const Timer timer;
  if (gpus > cluster.max_accelerators()) {
    return make_error("--gpus (", gpus, ") exceeds cluster ", cluster.name, " (", cluster.max_accelerators(),
                      " accelerators)");
  }
  if (top_k < 1) return make_error("--top (", top_k, ") must be at least 1");
  PlanResult out;
  std::vector<Candidate> candidates;
  const double capacity = cluster.memory_bytes();
  const std::vector<model::Recompute> all_rc = {model::Recompute::kNone, model::Recompute::kSelective,
                                                model::Recompute::kFull};
  for (std::int64_t tp : divisors(gpus)) {
    for (std::int64_t cp : divisors(gpus / tp)) {
      for (std::int64_t pp : divisors(gpus / (tp * cp))) {
        const std::int64_t dp = gpus / (tp * cp * pp);
        ++out.families;
        Layout base;
        base.tp = tp, base.cp = cp, base.pp = pp, base.dp = dp;
        base.sequence_parallel = space.sequence_parallel;
        base.zero = space.zero;
        base.reshard_after_forward = space.reshard_after_forward;
        base.layer_split = space.layer_split;
        base.microbatch = space.microbatch.value_or(1);
        base.v = 1;
        if (Status s = validate_layout(cfg, cluster, train, base, gpus); !s.ok()) {
          out.rejected.push_back({tp, cp, pp, dp, s.error().message()});
          continue;
        }
        std::vector<std::int64_t> mbs;
        if (space.microbatch) {
          mbs = {*space.microbatch};
        } else {
          for (std::int64_t mb : divisors(train.global_batch / dp)) {
            if (mb <= space.max_microbatch) mbs.push_back(mb);
          }
        }
        const std::vector<model::Recompute> rcs =
            space.recompute ? std::vector<model::Recompute>{*space.recompute} : all_rc;
        const std::vector<int> vs = space.v ? std::vector<int>{*space.v} : v_candidates(cfg.n_layers, pp);
        double least = std::numeric_limits<double>::infinity();
        std::string least_layout, last_error;
        bool any_fit = false;
        for (std::int64_t mb : mbs) {
          for (model::Recompute rc : rcs) {
            Layout l = base;
            l.microbatch = mb;
            l.recompute = rc;
            if (Status s = validate_layout(cfg, cluster, train, l, gpus); !s.ok()) {
              last_error = s.error().message();
              continue;
            }
            Result<StepCosts> costs = step_costs(cfg, cluster, train, l);
            if (!costs.ok()) {
              last_error = costs.error().message();
              continue;
            }
            const std::int64_t m = l.microbatches(train);
            for (int v : vs) {
              l.v = v;
              Result<schedule::LayerAssignment> assign = layer_assignment(cfg, l, *costs);
              if (!assign.ok()) continue;
              std::vector<int> ns;
              if (space.n) {
                if (*space.n <= m) ns.push_back(*space.n);
              } else {
                ns = {static_cast<int>(std::min<std::int64_t>(pp, m)), static_cast<int>(m)};
                if (ns[0] == ns[1]) ns.pop_back();
              }
              for (int n : ns) {
                l.v = v;
                l.n = n;
                EstimateOptions quick;
                quick.simulate = false;
                quick.assignment = &*assign;
                Result<Estimate> e = estimate_from_costs(cfg, cluster, train, l, gpus, *costs, quick);
                if (!e.ok()) {
                  last_error = e.error().message();
                  continue;
                }
                ++out.layouts_costed;
                if (e->memory.total_bytes < least) least = e->memory.total_bytes, least_layout = l.to_string();
                if (e->memory.total_bytes <= capacity * kQuickMemorySlack) {
                  any_fit = true;
                  ++out.layouts_fitting;
                  candidates.push_back({l, e->time.step_s});
                }
              }
            }
          }
        }
        if (!any_fit) {
          std::string reason = least < std::numeric_limits<double>::infinity()
                                   ? "out of memory: the leanest variant (" + least_layout + ") needs " +
                                         format_bytes(least) + " per accelerator, " + format_bytes(capacity) +
                                         " available"
                                   : last_error;
          out.rejected.push_back({tp, cp, pp, dp, reason});
        }
      }
    }
  }

  // Simulate the best quick-pass candidates; rank by simulated step time among those that fit.
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.step_s < b.step_s; });
  const std::size_t n_sim =
      std::min<std::size_t>(candidates.size(), static_cast<std::size_t>(std::max(16 * top_k, 96)));
  std::vector<Estimate> sims;
  for (std::size_t i = 0; i < n_sim; ++i) {
    Result<Estimate> e = estimate(cfg, cluster, train, candidates[i].layout, gpus);
    ++out.layouts_simulated;
    if (e.ok() && e->fits()) sims.push_back(std::move(*e));
  }
  std::stable_sort(sims.begin(), sims.end(),
                   [](const Estimate& a, const Estimate& b) { return a.time.step_s < b.time.step_s; });
  // One row per family of degrees (its best variant): the table compares layouts, not knob settings.
  for (Estimate& e : sims) {
    bool seen = false;
    for (const Estimate& r : out.ranked) {
      seen = seen || (r.layout.tp == e.layout.tp && r.layout.cp == e.layout.cp && r.layout.pp == e.layout.pp);
    }
    if (!seen) out.ranked.push_back(std::move(e));
    if (out.ranked.size() == static_cast<std::size_t>(top_k)) break;
  }
  out.search_s = timer.seconds();
  return out;
}

}  // namespace herd::planner
