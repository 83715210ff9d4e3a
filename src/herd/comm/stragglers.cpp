// Straggler detection from per-rank busy and wait medians (see stragglers.h).
#include "herd/comm/stragglers.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "herd/core/format.h"
#include "herd/core/stats.h"

namespace herd::comm {

std::vector<Straggler> find_stragglers(const std::vector<RankStepTimes>& ranks, double threshold) {
  std::map<int, std::vector<const RankStepTimes*>> stages;
  for (const RankStepTimes& r : ranks) {
    if (r.busy_s > 0) stages[r.stage].push_back(&r);
  }
  std::vector<Straggler> out;
  for (const auto& [stage, members] : stages) {
    if (members.size() < 2) continue;
    for (const RankStepTimes* r : members) {
      std::vector<double> busy, wait;
      for (const RankStepTimes* p : members) {
        if (p == r) continue;
        busy.push_back(p->busy_s);
        wait.push_back(p->wait_s);
      }
      const double peers_busy = median(busy);
      if (peers_busy <= 0 || r->busy_s < threshold * peers_busy) continue;
      Straggler s;
      s.rank = r->rank;
      s.host = r->host;
      s.slowdown = r->busy_s / peers_busy;
      s.busy_s = r->busy_s;
      s.wait_s = r->wait_s;
      s.peers_busy_s = peers_busy;
      s.peers_wait_s = median(wait);
      out.push_back(std::move(s));
    }
  }
  // Who waits on whom: every rank, of any stage, that waits in collectives for at least half of the
  // straggler's extra busy time more than the straggler itself does.
  for (Straggler& s : out) {
    const double extra = s.busy_s - s.peers_busy_s;
    for (const RankStepTimes& r : ranks) {
      if (r.rank != s.rank && r.wait_s >= s.wait_s + 0.5 * extra) s.waited_on_by.push_back(r.rank);
    }
    std::sort(s.waited_on_by.begin(), s.waited_on_by.end());
  }
  std::sort(out.begin(), out.end(), [](const Straggler& a, const Straggler& b) {
    return a.slowdown != b.slowdown ? a.slowdown > b.slowdown : a.rank < b.rank;
  });
  return out;
}

Json straggler_json(const Straggler& s) {
  return Json{{"rank", s.rank},
              {"host", s.host},
              {"slowdown", s.slowdown},
              {"busy_s", s.busy_s},
              {"wait_s", s.wait_s},
              {"peers_busy_s", s.peers_busy_s},
              {"peers_wait_s", s.peers_wait_s},
              {"waited_on_by", s.waited_on_by}};
}

std::string describe_straggler(const Straggler& s) {
  // Appended piece by piece: GCC 12's -O3 warns (-Wrestrict) on long chains of string + literal.
  std::ostringstream o;
  o << "rank " << s.rank;
  if (!s.host.empty()) o << " (" << s.host << ")";
  o << " is " << format_fixed(s.slowdown, 2) << "x busier than its peers' median (" << format_seconds(s.busy_s)
    << " vs " << format_seconds(s.peers_busy_s) << " a step)";
  if (s.waited_on_by.empty()) {
    o << "; no rank waits on it noticeably";
    return o.str();
  }
  o << "; rank" << (s.waited_on_by.size() > 1 ? "s " : " ");
  for (std::size_t i = 0; i < s.waited_on_by.size(); ++i) o << (i ? "," : "") << s.waited_on_by[i];
  o << " wait on it (" << format_seconds(s.peers_wait_s) << " a step in collectives vs its " << format_seconds(s.wait_s)
    << ")";
  return o.str();
}

}  // namespace herd::comm
