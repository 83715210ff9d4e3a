// Reading flight-recorder dumps and aligning them across ranks (see trace_analysis.h).
#include "herd/comm/trace_analysis.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "herd/core/format.h"
#include "herd/core/stats.h"

namespace herd::comm {

namespace {

// "herd_flight_<job>_rank<r>.json" -> job and r (1 to 9 digits); false for any other name.
bool parse_dump_name(const std::string& name, std::string* job, int* rank) {
  const std::string prefix = "herd_flight_", suffix = ".json", mark = "_rank";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string stem = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const std::size_t at = stem.rfind(mark);
  if (at == std::string::npos || at == 0) return false;
  const std::string digits = stem.substr(at + mark.size());
  if (digits.empty() || digits.size() > 9) return false;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  *job = stem.substr(0, at);
  *rank = std::stoi(digits);
  return true;
}

// The number after the first "step " in a rank's last activity ("step 12"), at most 15 digits.
std::optional<std::int64_t> step_in(const std::string& activity) {
  for (std::size_t at = activity.find("step "); at != std::string::npos; at = activity.find("step ", at + 1)) {
    std::size_t end = at + 5;
    while (end < activity.size() && end - at - 5 < 15 && activity[end] >= '0' && activity[end] <= '9') ++end;
    if (end > at + 5) return std::stoll(activity.substr(at + 5, end - at - 5));
  }
  return std::nullopt;
}

// Ranks and group members beyond this are not a real job (Llama 3 trained on 16K GPUs): the dump is
// corrupt. The bound also keeps a damaged dump from making the analysis allocate per-rank tables of
// millions of entries.
constexpr std::int64_t kMaxRank = 1 << 17;

Result<int> rank_field(const Json& obj, const std::string& parent, const std::string& key) {
  HERD_ASSIGN_OR_RETURN(std::int64_t v, json_int(obj, parent, key));
  if (v < 0 || v >= kMaxRank) {
    return make_error(field_path(parent, key), ": expected a rank from 0 to ", kMaxRank - 1, ", got ", v);
  }
  return static_cast<int>(v);
}

Result<std::uint64_t> count_field(const Json& obj, const std::string& parent, const std::string& key) {
  HERD_ASSIGN_OR_RETURN(std::int64_t v, json_int(obj, parent, key));
  if (v < 0) return make_error(field_path(parent, key), ": expected a non-negative integer, got ", v);
  return static_cast<std::uint64_t>(v);
}

Result<DumpEntry> parse_entry(const Json& x, const std::string& at) {
  if (!x.is_object()) return make_error(at, ": expected an object, got ", json_preview(x));
  DumpEntry e;
  HERD_ASSIGN_OR_RETURN(e.id, count_field(x, at, "id"));
  HERD_ASSIGN_OR_RETURN(e.seq, count_field(x, at, "seq"));
  HERD_ASSIGN_OR_RETURN(e.group, json_string(x, at, "group"));
  HERD_ASSIGN_OR_RETURN(e.group_id, json_int(x, at, "group_id"));
  HERD_ASSIGN_OR_RETURN(e.op, json_string(x, at, "op"));
  bool known = false;  // the names the recorder writes (comm::op_name)
  for (OpKind k : {OpKind::kAllReduce, OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kBroadcast, OpKind::kSend,
                   OpKind::kRecv, OpKind::kBarrier}) {
    known = known || e.op == op_name(k);
  }
  if (!known) {
    return make_error(at, ".op: unknown op ", json_preview(x["op"]),
                      "; expected all_reduce, all_gather, reduce_scatter, broadcast, send, recv or barrier");
  }
  HERD_ASSIGN_OR_RETURN(e.dtype, json_string_or(x, at, "dtype", ""));
  HERD_ASSIGN_OR_RETURN(e.count, count_field(x, at, "count"));
  HERD_ASSIGN_OR_RETURN(e.reduce, json_string_or(x, at, "reduce", ""));
  HERD_ASSIGN_OR_RETURN(std::int64_t peer, json_int_or(x, at, "peer", -1));
  HERD_ASSIGN_OR_RETURN(std::int64_t tag, json_int_or(x, at, "tag", -1));
  if (peer < -1 || peer >= kMaxRank) return make_error(at, ".peer: expected a group rank or -1, got ", peer);
  if (tag < -1 || tag > std::numeric_limits<int>::max()) return make_error(at, ".tag: out of range, got ", tag);
  e.peer = static_cast<int>(peer);
  e.tag = static_cast<int>(tag);
  HERD_ASSIGN_OR_RETURN(e.t_post, json_number_or(x, at, "t_post", 0));
  HERD_ASSIGN_OR_RETURN(e.t_start, json_number_or(x, at, "t_start", -1));
  HERD_ASSIGN_OR_RETURN(e.t_end, json_number_or(x, at, "t_end", -1));
  HERD_ASSIGN_OR_RETURN(e.state, json_string(x, at, "state"));
  static const std::set<std::string> kStates = {"scheduled", "started", "completed", "failed", "timed_out"};
  if (!kStates.count(e.state)) {
    return make_error(at, ".state: unknown state ", json_preview(x["state"]),
                      "; expected scheduled, started, completed, failed or timed_out");
  }
  return e;
}

Result<RankDump> parse_dump_json(const Json& j) {
  if (!j.is_object()) return make_error("expected a JSON object, got ", json_preview(j));
  RankDump d;
  HERD_ASSIGN_OR_RETURN(d.rank, rank_field(j, "", "rank"));
  HERD_ASSIGN_OR_RETURN(d.host, json_string_or(j, "", "host", ""));
  HERD_ASSIGN_OR_RETURN(d.reason, json_string_or(j, "", "reason", ""));
  HERD_ASSIGN_OR_RETURN(d.activity, json_string_or(j, "", "activity", ""));
  HERD_ASSIGN_OR_RETURN(double wall_ms, json_number_or(j, "", "wall_clock_at_creation_ms", 0));
  d.wall_t0_s = wall_ms * 1e-3;
  HERD_ASSIGN_OR_RETURN(d.time_now_s, json_number_or(j, "", "time_now_s", 0));
  HERD_ASSIGN_OR_RETURN(std::int64_t total, json_int_or(j, "", "total_recorded", 0));
  d.total_recorded = total < 0 ? 0 : static_cast<std::uint64_t>(total);
  if (j.contains("groups") && !j["groups"].is_null()) {
    const Json& gs = j["groups"];
    if (!gs.is_array()) return make_error("groups: expected a list, got ", json_preview(gs));
    for (std::size_t i = 0; i < gs.size(); ++i) {
      const std::string at = "groups[" + std::to_string(i) + "]";
      if (!gs[i].is_object()) return make_error(at, ": expected an object, got ", json_preview(gs[i]));
      GroupInfo g;
      HERD_ASSIGN_OR_RETURN(g.group_id, json_int(gs[i], at, "group_id"));
      HERD_ASSIGN_OR_RETURN(g.name, json_string(gs[i], at, "name"));
      if (!gs[i].contains("members") || !gs[i]["members"].is_array()) {
        return make_error(at, ".members: expected a list of global ranks");
      }
      const Json& ms = gs[i]["members"];
      for (std::size_t k = 0; k < ms.size(); ++k) {
        HERD_ASSIGN_OR_RETURN(int m, rank_field(Json{{"m", ms[k]}}, at + ".members[" + std::to_string(k) + "]", "m"));
        g.members.push_back(m);
      }
      d.groups.push_back(std::move(g));
    }
  }
  if (j.contains("steps") && !j["steps"].is_null()) {
    const Json& ss = j["steps"];
    if (!ss.is_array()) return make_error("steps: expected a list, got ", json_preview(ss));
    for (std::size_t i = 0; i < ss.size(); ++i) {
      const std::string at = "steps[" + std::to_string(i) + "]";
      if (!ss[i].is_object()) return make_error(at, ": expected an object, got ", json_preview(ss[i]));
      FlightRecorder::StepTimes t;
      HERD_ASSIGN_OR_RETURN(t.step, json_int(ss[i], at, "step"));
      HERD_ASSIGN_OR_RETURN(t.busy_s, json_number(ss[i], at, "busy_s"));
      HERD_ASSIGN_OR_RETURN(t.wait_s, json_number(ss[i], at, "wait_s"));
      // stall_s and queued_s are optional (dumps of herd before they were measured).
      if (ss[i].contains("stall_s")) {
        HERD_ASSIGN_OR_RETURN(t.stall_s, json_number(ss[i], at, "stall_s"));
      }
      if (ss[i].contains("queued_s")) {
        HERD_ASSIGN_OR_RETURN(t.queued_s, json_number(ss[i], at, "queued_s"));
      }
      for (const double v : {t.busy_s, t.wait_s, t.stall_s, t.queued_s}) {
        if (!(v >= 0) || !std::isfinite(v)) {
          return make_error(at, ": busy_s, wait_s, stall_s and queued_s must be finite seconds >= 0");
        }
      }
      d.steps.push_back(t);
    }
  }
  if (!j.contains("entries") || !j["entries"].is_array()) return make_error("entries: expected a list of calls");
  const Json& es = j["entries"];
  for (std::size_t i = 0; i < es.size(); ++i) {
    HERD_ASSIGN_OR_RETURN(DumpEntry e, parse_entry(es[i], "entries[" + std::to_string(i) + "]"));
    d.entries.push_back(std::move(e));
  }
  return d;
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Stragglers from the dumps' step times (dump_step_times), judged as the trainer judges them live.
void find_dump_stragglers(const std::vector<RankDump>& dumps, TraceReport& rep) {
  rep.stragglers = find_stragglers(dump_step_times(dumps, &rep.straggler_steps));
}

// Strongly connected components (Tarjan's algorithm with an explicit stack: a wait-for chain may be as
// long as the job is wide). Returns each vertex's component number.
std::vector<int> components(const std::vector<std::vector<int>>& adj) {
  const std::size_t n = adj.size();
  std::vector<int> index(n, -1), low(n, 0), comp(n, -1);
  std::vector<std::size_t> stack;
  std::vector<char> on(n, 0);
  int next = 0, ncomp = 0;
  struct Frame {
    std::size_t v;
    std::size_t edge;
  };
  for (std::size_t root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    std::vector<Frame> calls{{root, 0}};
    index[root] = low[root] = next++;
    stack.push_back(root);
    on[root] = 1;
    while (!calls.empty()) {
      Frame& f = calls.back();
      const std::size_t v = f.v;
      if (f.edge < adj[v].size()) {
        const auto w = static_cast<std::size_t>(adj[v][f.edge++]);
        if (index[w] < 0) {
          index[w] = low[w] = next++;
          stack.push_back(w);
          on[w] = 1;
          calls.push_back({w, 0});
        } else if (on[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        while (true) {
          const std::size_t w = stack.back();
          stack.pop_back();
          on[w] = 0;
          comp[w] = ncomp;
          if (w == v) break;
        }
        ++ncomp;
      }
      calls.pop_back();
      if (!calls.empty()) low[calls.back().v] = std::min(low[calls.back().v], low[v]);
    }
  }
  return comp;
}

}  // namespace

Result<RankDump> parse_flight_dump(const std::string& text, const std::string& source) {
  Result<Json> j = parse_json_text(text, source);
  if (!j.ok()) return j.error();
  Result<RankDump> d = parse_dump_json(*j);
  if (!d.ok()) {
    return make_error(source, ": ", d.error().message(), "; not a flight-recorder dump herd wrote (or a damaged one)");
  }
  d->file = source;
  return d;
}

Result<JobDumps> read_job_dumps(const std::string& dir, const std::string& job) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error("herd trace: '", dir, "' is not a directory; give the diagnostics.dir of the run");
  }
  struct Found {
    std::map<int, std::string> files;
    // The write time of the job's newest dump; none while no time could be read. (A default
    // file_time_type is the file clock's epoch, which libstdc++ places in 2174: never a start value.)
    std::optional<fs::file_time_type> newest;
  };
  std::map<std::string, Found> jobs;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string job;
    int rank = 0;
    if (!parse_dump_name(it->path().filename().string(), &job, &rank)) continue;
    // Only regular files (a symbolic link to one included): opening a FIFO would wait for a writer.
    std::error_code fec;
    if (!it->is_regular_file(fec)) continue;
    Found& f = jobs[job];
    f.files[rank] = it->path().string();
    std::error_code tec;
    const fs::file_time_type t = fs::last_write_time(it->path(), tec);
    if (!tec && (!f.newest || t > *f.newest)) f.newest = t;
  }
  if (ec) return make_error("herd trace: cannot list '", dir, "': ", ec.message());
  if (jobs.empty()) {
    return make_error("herd trace: no flight-recorder dumps (herd_flight_<job>_rank<r>.json) in '", dir,
                      "'; give the diagnostics.dir of the run");
  }
  JobDumps out;
  if (job.empty()) {
    auto best = jobs.begin();
    for (auto it = jobs.begin(); it != jobs.end(); ++it) {
      // A job with a readable time beats one without; of two with, the later one.
      if (it->second.newest > best->second.newest) best = it;
    }
    out.job = best->first;
  } else {
    if (!jobs.count(job)) {
      std::string names;
      for (const auto& [k, v] : jobs) names += (names.empty() ? "" : ", ") + k;
      return make_error("herd trace: --job '", job, "': no dumps of that job in '", dir, "'; jobs there: ", names);
    }
    out.job = job;
  }
  for (const auto& [k, v] : jobs) {
    if (k != out.job) out.other_jobs.push_back(k);
  }
  // A dump that cannot be read (truncated by a rank killed while writing, damaged, renamed) is left out
  // with a warning naming it; the others are analyzed, as for a rank that left no dump.
  std::optional<Error> first_bad;
  for (const auto& [rank, path] : jobs[out.job].files) {
    Result<RankDump> d = [&, rank = rank, path = path]() -> Result<RankDump> {
      std::ifstream in(path, std::ios::binary);
      if (!in) return make_error(path, ": cannot read");
      std::stringstream ss;
      ss << in.rdbuf();
      HERD_ASSIGN_OR_RETURN(RankDump parsed, parse_flight_dump(ss.str(), path));
      if (parsed.rank != rank) {
        return make_error(path, ": rank: the file is named for rank ", rank, " but holds rank ", parsed.rank,
                          "'s dump; do not rename dumps");
      }
      return parsed;
    }();
    if (!d.ok()) {
      if (!first_bad) first_bad = d.error();
      out.warnings.push_back(d.error().message() + "; analyzed without it");
      continue;
    }
    out.ranks.push_back(std::move(d).value());
  }
  if (out.ranks.empty() && first_bad) return *first_bad;
  return out;
}

std::string describe_call(const DumpEntry& e) {
  std::string s = e.op + " #" + std::to_string(e.seq) + " of '" + e.group + "' (group " + std::to_string(e.group_id);
  if (e.op == "send" || e.op == "recv") {
    s += (e.op == "send" ? ", to group rank " : ", from group rank ") + std::to_string(e.peer) + " tag " +
         std::to_string(e.tag);
  } else if (e.op == "broadcast") {
    s += ", root " + std::to_string(e.peer);
  }
  if (e.op != "barrier") {
    s += ", " + format_thousands(static_cast<std::int64_t>(e.count)) + " " + e.dtype;
    if (!e.reduce.empty()) s += " " + e.reduce;
  }
  return s + ")";
}

namespace {

// The dumps as the analysis reads them: each rank's dump, every group's members and, per rank and group,
// the collectives its dump holds by sequence number.
struct DumpIndex {
  std::map<int, const RankDump*> by_rank;
  std::map<std::int64_t, GroupInfo> groups;
  std::map<std::pair<int, std::int64_t>, std::map<std::uint64_t, const DumpEntry*>> coll;
  int world = 0;

  // Whether `rank` posted call `seq` of group `gid`: its dump holds that call or a later one.
  bool posted(int rank, std::int64_t gid, std::uint64_t seq) const {
    auto it = coll.find({rank, gid});
    return it != coll.end() && !it->second.empty() && it->second.rbegin()->first >= seq;
  }
  // A time of `rank`'s dump (seconds from its recorder's start) on the wall clock.
  double wall(int rank, double t) const {
    auto it = by_rank.find(rank);
    return it == by_rank.end() ? t : it->second->wall_t0_s + t;
  }
};

// Group membership: the union of the dumps' tables; a group no table names (a dump from before the
// table existed) is taken to be the ranks whose entries mention it.
DumpIndex index_dumps(const std::vector<RankDump>& dumps) {
  DumpIndex ix;
  for (const RankDump& d : dumps) {
    ix.by_rank[d.rank] = &d;
    ix.world = std::max(ix.world, d.rank + 1);
    for (const GroupInfo& g : d.groups) {
      ix.groups.emplace(g.group_id, g);
      for (int m : g.members) ix.world = std::max(ix.world, m + 1);
    }
  }
  for (const RankDump& d : dumps) {
    for (const DumpEntry& e : d.entries) {
      auto it = ix.groups.find(e.group_id);
      if (it == ix.groups.end()) it = ix.groups.emplace(e.group_id, GroupInfo{e.group_id, e.group, {}}).first;
      bool declared = false;
      for (const GroupInfo& g : d.groups) declared = declared || g.group_id == e.group_id;
      if (!declared && !contains(it->second.members, d.rank)) it->second.members.push_back(d.rank);
      if (e.collective()) ix.coll[{d.rank, e.group_id}][e.seq] = &e;
    }
  }
  return ix;
}

// Desyncs: every (group, seq) held by two or more ranks, compared field by field; the variants that
// disagree, the most common first.
std::vector<DesyncCall> find_desyncs(const DumpIndex& ix) {
  std::map<std::pair<std::int64_t, std::uint64_t>, std::vector<std::pair<int, const DumpEntry*>>> at;
  for (const auto& [key, seqs] : ix.coll) {
    for (const auto& [seq, e] : seqs) at[{key.second, seq}].push_back({key.first, e});
  }
  std::vector<DesyncCall> out;
  for (const auto& [key, calls] : at) {
    DesyncCall dc;
    dc.group_id = key.first;
    dc.seq = key.second;
    dc.group = calls.front().second->group;
    for (const auto& call : calls) {
      const int rank = call.first;
      const DumpEntry* e = call.second;  // not a structured binding: clang 14 cannot capture one
      const int root = e->op == "broadcast" ? e->peer : -1;
      auto same = [&](const DesyncCall::Variant& v) {
        return v.op == e->op && v.dtype == e->dtype && v.count == e->count && v.reduce == e->reduce && v.root == root;
      };
      auto v = std::find_if(dc.variants.begin(), dc.variants.end(), same);
      if (v == dc.variants.end()) {
        dc.variants.push_back({e->op, e->dtype, e->reduce, e->count, root, {}});
        v = dc.variants.end() - 1;
      }
      v->ranks.push_back(rank);
    }
    if (dc.variants.size() < 2) continue;
    std::stable_sort(dc.variants.begin(), dc.variants.end(),
                     [](const auto& a, const auto& b) { return a.ranks.size() > b.ranks.size(); });
    out.push_back(std::move(dc));
  }
  return out;
}

// The wait-for graph: a rank in an unfinished call waits for each member that has not posted it (a send
// or recv for its peer, unless the peer is in the matching half). Fills every rank's state, the ranks
// without a dump and the stuck calls (earliest first); returns each rank's waits.
std::vector<std::vector<int>> wait_for_graph(const DumpIndex& ix, double min_wait_s, TraceReport& rep) {
  std::vector<std::vector<int>> adj(static_cast<std::size_t>(ix.world));
  std::map<std::pair<std::int64_t, std::uint64_t>, StuckCall> stuck_coll;
  std::vector<StuckCall> stuck_p2p;
  rep.ranks.resize(static_cast<std::size_t>(ix.world));
  for (int r = 0; r < ix.world; ++r) {
    RankState& rs = rep.ranks[static_cast<std::size_t>(r)];
    rs.rank = r;
    auto it = ix.by_rank.find(r);
    if (it == ix.by_rank.end()) {
      rs.in = "no dump";
      rep.missing_dumps.push_back(r);
      continue;
    }
    const RankDump& d = *it->second;
    rs.dumped = true;
    rs.host = d.host;
    rs.reason = d.reason;
    rs.activity = d.activity;
    if (const std::optional<std::int64_t> step = step_in(d.activity)) rs.last_step = *step - 1;
    // A dump taken between steps (diagnostics.dump_every) has the step just finished in its step times.
    if (!d.steps.empty() && (!rs.last_step || *rs.last_step < d.steps.back().step)) rs.last_step = d.steps.back().step;
    std::set<int> waits;
    const DumpEntry* first_open = nullptr;
    const DumpEntry* first_blocked = nullptr;
    for (const DumpEntry& e : d.entries) {
      if (e.completed()) continue;
      if (!first_open) first_open = &e;
      // A call posted moments before the dump (a dump on request, of a job that runs) is in flight, not
      // stuck: whoever it waits for may well be on the way.
      if (d.time_now_s > 0 && d.time_now_s - e.t_post < min_wait_s) continue;
      const std::vector<int>& members = ix.groups.find(e.group_id)->second.members;
      std::vector<int> missing;
      if (e.collective()) {
        for (int q : members) {
          if (q != r && !ix.posted(q, e.group_id, e.seq)) missing.push_back(q);
        }
        if (!missing.empty()) {
          StuckCall& sc = stuck_coll[{e.group_id, e.seq}];
          if (sc.entered.empty()) {
            sc = StuckCall{e.group, e.group_id, e.seq, e.op, e.dtype, e.count, {}, missing, ix.wall(r, e.t_post)};
            for (int q : members) {
              if (q == r || ix.posted(q, e.group_id, e.seq)) sc.entered.push_back(q);
            }
          }
          sc.first_post = std::min(sc.first_post, ix.wall(r, e.t_post));
        }
      } else if (e.peer >= 0 && e.peer < static_cast<int>(members.size())) {
        const int q = members[static_cast<std::size_t>(e.peer)];
        const int my = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
        bool matched = false;
        auto pit = ix.by_rank.find(q);
        if (pit != ix.by_rank.end()) {
          for (const DumpEntry& o : pit->second->entries) {
            matched = matched || (!o.completed() && o.group_id == e.group_id && o.peer == my && o.tag == e.tag &&
                                  o.op == (e.op == "send" ? "recv" : "send"));
          }
        }
        if (!matched) {
          missing.push_back(q);
          stuck_p2p.push_back(
              StuckCall{e.group, e.group_id, e.seq, e.op, e.dtype, e.count, {r}, {q}, ix.wall(r, e.t_post)});
        }
      }
      if (!missing.empty() && !first_blocked) first_blocked = &e;
      waits.insert(missing.begin(), missing.end());
    }
    const DumpEntry* call = first_blocked ? first_blocked : first_open;
    if (call) {
      rs.call = *call;
      rs.in = describe_call(*call) + ", " + call->state;
      if (d.time_now_s > 0 && d.time_now_s - call->t_post < min_wait_s) rs.in += " (in flight at the dump)";
    } else {
      rs.in = "outside communication";
    }
    rs.waits_for.assign(waits.begin(), waits.end());
    adj[static_cast<std::size_t>(r)] = rs.waits_for;
  }
  for (auto& [key, sc] : stuck_coll) rep.stuck.push_back(sc);
  for (StuckCall& sc : stuck_p2p) rep.stuck.push_back(std::move(sc));
  std::stable_sort(rep.stuck.begin(), rep.stuck.end(),
                   [](const StuckCall& a, const StuckCall& b) { return a.first_post < b.first_post; });
  return adj;
}

// Culprits: the sink components reachable from a waiting rank (a rank waiting for nobody, or a cycle
// of ranks waiting for each other); everyone waiting on the way there is a victim. Then the first
// disagreement: the earliest stuck call that a culprit did not post (else the earliest).
void assign_roles(const std::vector<std::vector<int>>& adj, TraceReport& rep) {
  const int world = static_cast<int>(adj.size());
  const std::vector<int> comp = components(adj);
  std::map<int, bool> comp_has_exit;
  for (int r = 0; r < world; ++r) {
    for (int q : adj[static_cast<std::size_t>(r)]) {
      if (comp[static_cast<std::size_t>(q)] != comp[static_cast<std::size_t>(r)]) comp_has_exit[comp[r]] = true;
    }
  }
  std::vector<char> reach(static_cast<std::size_t>(world), 0);
  std::vector<int> todo;
  for (int r = 0; r < world; ++r) {
    if (!adj[static_cast<std::size_t>(r)].empty()) todo.push_back(r);
  }
  while (!todo.empty()) {
    const int r = todo.back();
    todo.pop_back();
    if (reach[static_cast<std::size_t>(r)]) continue;
    reach[static_cast<std::size_t>(r)] = 1;
    for (int q : adj[static_cast<std::size_t>(r)]) todo.push_back(q);
  }
  for (int r = 0; r < world; ++r) {
    RankState& rs = rep.ranks[static_cast<std::size_t>(r)];
    if (!reach[static_cast<std::size_t>(r)]) continue;
    if (!comp_has_exit[comp[static_cast<std::size_t>(r)]]) {
      rs.role = "culprit";
      rep.culprit_ranks.push_back(r);
    } else {
      rs.role = "victim";
    }
  }
  for (const StuckCall& sc : rep.stuck) {
    bool names_culprit = false;
    for (int q : sc.missing) names_culprit = names_culprit || contains(rep.culprit_ranks, q);
    if (names_culprit) {
      rep.first_disagreement = sc;
      break;
    }
  }
  if (!rep.first_disagreement && !rep.stuck.empty()) rep.first_disagreement = rep.stuck.front();
}

}  // namespace

std::vector<RankStepTimes> dump_step_times(const std::vector<RankDump>& dumps, int* steps_used) {
  std::vector<RankStepTimes> ranks;
  int used = 0;
  for (const RankDump& d : dumps) {
    if (d.steps.empty()) continue;
    RankStepTimes t;
    t.rank = d.rank;
    t.host = d.host;
    for (const GroupInfo& g : d.groups) {
      const auto at = std::find(g.members.begin(), g.members.end(), d.rank);
      if (g.name == "pp" && at != g.members.end()) t.stage = static_cast<int>(at - g.members.begin());
    }
    const std::size_t n = std::min<std::size_t>(d.steps.size(), kStragglerWindow);
    std::vector<double> busy, stall, queued, wait;
    for (std::size_t i = d.steps.size() - n; i < d.steps.size(); ++i) {
      busy.push_back(d.steps[i].busy_s);
      stall.push_back(d.steps[i].stall_s);
      queued.push_back(d.steps[i].queued_s);
      wait.push_back(d.steps[i].wait_s);
    }
    t.busy_s = median(busy);
    t.stall_s = median(stall);
    t.queued_s = median(queued);
    t.wait_s = mean(wait);  // a mean, as the trainer's (comm::RankStepTimes says why)
    used = std::max(used, static_cast<int>(n));
    ranks.push_back(std::move(t));
  }
  if (steps_used != nullptr) *steps_used = used;
  return ranks;
}

TraceReport analyze_dumps(const std::vector<RankDump>& dumps, const std::string& job, double min_wait_s) {
  TraceReport rep;
  rep.job = job;
  const DumpIndex ix = index_dumps(dumps);
  rep.world = ix.world;
  rep.desync = find_desyncs(ix);
  const std::vector<std::vector<int>> adj = wait_for_graph(ix, min_wait_s, rep);
  assign_roles(adj, rep);
  find_dump_stragglers(dumps, rep);
  return rep;
}

}  // namespace herd::comm
