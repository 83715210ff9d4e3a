// The knobs the planner's search sets within a family of degrees (planner/search.h): each is a Layout
// field with its flag, the values searched unless the user fixed it, and how it is printed. Adding a
// knob is one row of knobs() in search_knobs.cpp. Internal to planner/search.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "herd/planner/search.h"

namespace herd::planner::search {

// The divisors of n, ascending.
std::vector<std::int64_t> divisors(std::int64_t n);

struct Ctx {
  const model::LlamaConfig& cfg;
  const topology::Cluster& cluster;
  const TrainingSpec& train;
  std::int64_t gpus;
  const SearchSpace& space;
};

using Values = std::vector<std::int64_t>;
using Given = std::optional<std::int64_t>;

// kCosts: the step costs depend on the knob (computed once per combination of these knobs);
// kSchedule: only the pipeline schedule does. kSchedule knobs may read the kCosts ones (N reads M).
enum class Stage { kCosts, kSchedule };

struct Knob {
  const char* name;  // the key under `layout` in the estimate's JSON
  const char* flag;
  Stage stage;
  KnobChoice::Type type;
  std::int64_t (*get)(const Layout&);
  void (*set)(Layout&, std::int64_t);
  Given (*given)(const SearchSpace&);
  Values (*values)(const Ctx&, const Layout&, Given);  // the given value (if usable) or those searched
  std::string (*text)(std::int64_t);
};

// The knobs in the order the search sets them (and `herd estimate` lists them).
const std::vector<Knob>& knobs();

// Every combination of `ks`'s values on top of `l`, each passed to `visit`. A knob's values may read
// the knobs set before it (knobs() lists N after the micro-batch size, whose M it needs).
template <class Visit>
void combinations(const Ctx& c, const std::vector<const Knob*>& ks, std::size_t i, Layout& l, Visit&& visit) {
  if (i == ks.size()) {
    visit(l);
    return;
  }
  const Knob& k = *ks[i];
  for (std::int64_t x : k.values(c, l, k.given(c.space))) {
    k.set(l, x);
    combinations(c, ks, i + 1, l, visit);
  }
}

}  // namespace herd::planner::search
