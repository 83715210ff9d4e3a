#include "herd/planner/search_knobs.h"

#include <algorithm>
#include <type_traits>

namespace herd::planner::search {

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

namespace {

std::string integer_text(std::int64_t x) { return std::to_string(x); }
std::string boolean_text(std::int64_t x) { return x ? "true" : "false"; }
std::string recompute_text(std::int64_t x) { return model::recompute_name(static_cast<model::Recompute>(x)); }

template <auto Field, auto Fixed>
Knob knob(const char* name, const char* flag, Stage stage, Values (*values)(const Ctx&, const Layout&, Given),
          std::string (*text)(std::int64_t) = nullptr) {
  using T = std::remove_cvref_t<decltype(std::declval<Layout&>().*Field)>;
  const KnobChoice::Type type = std::is_same_v<T, bool> ? KnobChoice::Type::kBoolean
                                : std::is_enum_v<T>     ? KnobChoice::Type::kName
                                                        : KnobChoice::Type::kInteger;
  if (!text) text = std::is_same_v<T, bool> ? boolean_text : integer_text;
  return {name,
          flag,
          stage,
          type,
          [](const Layout& l) { return static_cast<std::int64_t>(l.*Field); },
          [](Layout& l, std::int64_t x) { l.*Field = static_cast<T>(x); },
          [](const SearchSpace& s) -> Given {
            if (!(s.*Fixed)) return std::nullopt;
            return static_cast<std::int64_t>(*(s.*Fixed));
          },
          values,
          text};
}

Values microbatch_values(const Ctx& c, const Layout& l, Given g) {
  if (g) return {*g};
  Values out;
  for (std::int64_t mb : divisors(c.train.global_batch / l.dp)) {
    if (mb <= c.space.max_microbatch) out.push_back(mb);
  }
  return out;
}

Values recompute_values(const Ctx&, const Layout&, Given g) {
  if (g) return {*g};
  return {static_cast<std::int64_t>(model::Recompute::kNone), static_cast<std::int64_t>(model::Recompute::kSelective),
          static_cast<std::int64_t>(model::Recompute::kFull)};
}

// Without TP, sequence parallelism changes nothing: false, as the estimate's JSON reports it.
Values sequence_parallel_values(const Ctx&, const Layout& l, Given g) {
  if (g) return {*g};
  return l.tp > 1 ? Values{1, 0} : Values{0};
}

// V: powers of two, and the V that gives every virtual stage the same number of slots (layers +
// embedding + output), which is how Llama 3 405B fills PP*V = 128 stages.
Values v_values(const Ctx& c, const Layout& l, Given g) {
  if (g) return {*g};
  const std::int64_t layers = c.cfg.n_layers, pp = l.pp;
  if (pp == 1) return {1};
  Values vs;
  for (std::int64_t v = 1; pp * v <= layers + 2; v *= 2) vs.push_back(v);
  if ((layers + 2) % pp == 0) vs.push_back((layers + 2) / pp);
  if (layers % pp == 0 && layers / pp > 1) vs.push_back(layers / pp);
  std::sort(vs.begin(), vs.end());
  vs.erase(std::unique(vs.begin(), vs.end()), vs.end());
  return vs;
}

// N: depth-first (min(PP, M)) and breadth-first (M); a given N beyond M has no layout here.
Values n_values(const Ctx& c, const Layout& l, Given g) {
  const std::int64_t m = l.microbatches(c.train);
  if (g) return *g <= m ? Values{*g} : Values{};
  const std::int64_t depth = std::min<std::int64_t>(l.pp, m);
  return depth == m ? Values{m} : Values{depth, m};
}

}  // namespace

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> k = {
      knob<&Layout::v, &SearchSpace::v>("v", "--v", Stage::kSchedule, v_values),
      knob<&Layout::microbatch, &SearchSpace::microbatch>("microbatch_size", "--microbatch-size", Stage::kCosts,
                                                          microbatch_values),
      knob<&Layout::n, &SearchSpace::n>("n", "--n", Stage::kSchedule, n_values),
      knob<&Layout::recompute, &SearchSpace::recompute>("recompute", "--recompute", Stage::kCosts, recompute_values,
                                                        recompute_text),
      knob<&Layout::sequence_parallel, &SearchSpace::sequence_parallel>("sequence_parallel", "--sequence-parallel",
                                                                        Stage::kCosts, sequence_parallel_values),
  };
  return k;
}

}  // namespace herd::planner::search
