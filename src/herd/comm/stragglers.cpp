// Straggler detection from per-rank busy and wait medians (see stragglers.h).
#include "herd/comm/stragglers.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "herd/core/format.h"
#include "herd/core/stats.h"

namespace herd::comm {

const char* straggler_kind_name(StragglerKind k) { return k == StragglerKind::kSlow ? "slow" : "stalled"; }

std::vector<Straggler> find_stragglers(const std::vector<RankStepTimes>& ranks, const StragglerThresholds& t) {
  std::map<int, std::vector<const RankStepTimes*>> stages;
  for (const RankStepTimes& r : ranks) {
    if (r.busy_s > 0) stages[r.stage].push_back(&r);
  }
  const auto own = [](const RankStepTimes& r) { return r.busy_s + r.stall_s; };
  std::vector<Straggler> out;
  for (const auto& [stage, members] : stages) {
    if (members.size() < 2) continue;
    for (const RankStepTimes* r : members) {
      std::vector<double> busy, total, wait;
      for (const RankStepTimes* p : members) {
        if (p == r) continue;
        busy.push_back(p->busy_s);
        total.push_back(own(*p));
        wait.push_back(p->wait_s);
      }
      Straggler s;
      s.peers_busy_s = median(busy);
      s.peers_own_s = median(total);
      s.peers_wait_s = median(wait);
      double extra = 0;  // the wall time a step it costs over its peers
      if (r->busy_s >= t.slow * s.peers_busy_s) {
        s.kind = StragglerKind::kSlow;
        s.slowdown = r->busy_s / s.peers_busy_s;
        extra = r->busy_s - s.peers_busy_s;
      } else if (own(*r) >= t.stalled * s.peers_own_s) {
        s.kind = StragglerKind::kStalled;
        s.slowdown = own(*r) / s.peers_own_s;
        extra = own(*r) - s.peers_own_s;
      } else {
        continue;
      }
      s.rank = r->rank;
      s.host = r->host;
      s.busy_s = r->busy_s;
      s.stall_s = r->stall_s;
      s.queued_s = r->queued_s;
      s.wait_s = r->wait_s;
      // Who waits on it: every rank, of any stage, that waits in collectives for at least half of its extra
      // time more than it does itself. A stalled rank is also stopped while it waits in a collective, where
      // its peers wait with it, which lengthens its own wait too: there, any rank that waits longer than it
      // does waits on it.
      const double margin = s.kind == StragglerKind::kSlow ? 0.5 * extra : 0.0;
      for (const RankStepTimes& q : ranks) {
        if (q.rank != r->rank && q.wait_s > r->wait_s + margin) s.waited_on_by.push_back(q.rank);
      }
      std::sort(s.waited_on_by.begin(), s.waited_on_by.end());
      out.push_back(std::move(s));
    }
  }
  std::sort(out.begin(), out.end(), [](const Straggler& a, const Straggler& b) {
    return a.slowdown != b.slowdown ? a.slowdown > b.slowdown : a.rank < b.rank;
  });
  return out;
}

Json straggler_json(const Straggler& s) {
  return Json{{"rank", s.rank},
              {"host", s.host},
              {"kind", straggler_kind_name(s.kind)},
              {"slowdown", s.slowdown},
              {"busy_s", s.busy_s},
              {"stall_s", s.stall_s},
              {"queued_s", s.queued_s},
              {"wait_s", s.wait_s},
              {"peers_busy_s", s.peers_busy_s},
              {"peers_own_s", s.peers_own_s},
              {"peers_wait_s", s.peers_wait_s},
              {"waited_on_by", s.waited_on_by}};
}

std::string describe_straggler(const Straggler& s) {
  // Appended piece by piece: GCC 12's -O3 warns (-Wrestrict) on long chains of string + literal.
  std::ostringstream o;
  o << "rank " << s.rank;
  if (!s.host.empty()) o << " (" << s.host << ")";
  if (s.kind == StragglerKind::kSlow) {
    o << " is " << format_fixed(s.slowdown, 2) << "x slower than its peers' median (" << format_seconds(s.busy_s)
      << " vs " << format_seconds(s.peers_busy_s) << " of CPU a step)";
  } else {
    o << " is stalled: " << format_fixed(s.slowdown, 2) << "x its peers' time (" << format_seconds(s.busy_s)
      << " computing + " << format_seconds(s.stall_s) << " stopped, asleep or blocked a step vs "
      << format_seconds(s.peers_own_s) << ")";
  }
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
