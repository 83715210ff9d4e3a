// Text, JSON and SVG renderings of a flight-recorder analysis (see trace_report.h).
#include "herd/comm/trace_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "herd/core/format.h"
#include "herd/core/xml.h"

namespace herd::comm {

namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.empty()) return "none";
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ranks[i]);
  }
  return s;
}

Json entry_json(const DumpEntry& e) {
  Json x;
  x["group"] = e.group;
  x["group_id"] = e.group_id;
  x["seq"] = e.seq;
  x["op"] = e.op;
  x["dtype"] = e.dtype;
  x["count"] = e.count;
  if (!e.reduce.empty()) x["reduce"] = e.reduce;
  if (e.peer >= 0) x["peer"] = e.peer;
  if (e.tag >= 0) x["tag"] = e.tag;
  x["state"] = e.state;
  return x;
}

Json stuck_json(const StuckCall& s) {
  return Json{{"group", s.group}, {"group_id", s.group_id}, {"seq", s.seq},         {"op", s.op},
              {"dtype", s.dtype}, {"count", s.count},       {"entered", s.entered}, {"missing", s.missing}};
}

std::string stuck_text(const StuckCall& s) {
  return s.op + " #" + std::to_string(s.seq) + " of '" + s.group + "' (group " + std::to_string(s.group_id) +
         "): entered by " + ranks_text(s.entered) + "; never posted by " + ranks_text(s.missing);
}

std::string variant_text(const DesyncCall::Variant& v) {
  std::string s = v.op + " " + format_thousands(static_cast<std::int64_t>(v.count)) + " " + v.dtype;
  if (!v.reduce.empty()) s += " " + v.reduce;
  if (v.root >= 0) s += " root " + std::to_string(v.root);
  return s + " on ranks " + ranks_text(v.ranks);
}

}  // namespace

Json trace_report_json(const TraceReport& rep) {
  Json j;
  j["job"] = rep.job;
  j["world"] = rep.world;
  j["culprit_ranks"] = rep.culprit_ranks;
  j["first_disagreement"] = rep.first_disagreement ? stuck_json(*rep.first_disagreement) : Json(nullptr);
  Json stuck = Json::array();
  for (const StuckCall& s : rep.stuck) stuck.push_back(stuck_json(s));
  j["stuck"] = std::move(stuck);
  Json desync = Json::array();
  for (const DesyncCall& d : rep.desync) {
    Json vs = Json::array();
    for (const DesyncCall::Variant& v : d.variants) {
      Json x{{"op", v.op}, {"dtype", v.dtype}, {"count", v.count}, {"ranks", v.ranks}};
      if (!v.reduce.empty()) x["reduce"] = v.reduce;
      if (v.root >= 0) x["root"] = v.root;
      vs.push_back(std::move(x));
    }
    desync.push_back(Json{{"group", d.group}, {"group_id", d.group_id}, {"seq", d.seq}, {"variants", std::move(vs)}});
  }
  j["desync"] = std::move(desync);
  Json ranks = Json::array();
  for (const RankState& r : rep.ranks) {
    Json x;
    x["rank"] = r.rank;
    x["dumped"] = r.dumped;
    x["host"] = r.host;
    x["last_step"] = r.last_step ? Json(*r.last_step) : Json(nullptr);
    x["activity"] = r.activity;
    x["call"] = r.call ? entry_json(*r.call) : Json(nullptr);
    x["in"] = r.in;
    x["waits_for"] = r.waits_for;
    x["role"] = r.role;
    x["reason"] = r.reason;
    ranks.push_back(std::move(x));
  }
  j["ranks"] = std::move(ranks);
  j["missing_dumps"] = rep.missing_dumps;
  Json stragglers = Json::array();
  for (const Straggler& s : rep.stragglers) stragglers.push_back(straggler_json(s));
  j["stragglers"] = std::move(stragglers);
  j["straggler_steps"] = rep.straggler_steps;
  return j;
}

std::string trace_report_text(const TraceReport& rep) {
  std::ostringstream o;
  const int dumped = rep.world - static_cast<int>(rep.missing_dumps.size());
  o << "job " << rep.job << ": " << rep.world << (rep.world == 1 ? " rank, " : " ranks, ") << dumped
    << (dumped == 1 ? " dump" : " dumps");
  if (!rep.missing_dumps.empty()) o << " (no dump from rank " << ranks_text(rep.missing_dumps) << ")";
  o << "\n";
  if (rep.culprit_ranks.empty()) {
    o << "culprit: none (no rank waits on a call another rank never posted)\n";
  } else {
    for (int c : rep.culprit_ranks) {
      const RankState& r = rep.ranks[static_cast<std::size_t>(c)];
      o << "culprit: rank " << c << ", " << r.in;
      if (!r.activity.empty()) o << " (last activity '" << r.activity << "')";
      o << "\n";
    }
  }
  if (rep.first_disagreement) o << "first disagreement: " << stuck_text(*rep.first_disagreement) << "\n";
  for (const StuckCall& s : rep.stuck) {
    if (rep.first_disagreement && s.group_id == rep.first_disagreement->group_id &&
        s.seq == rep.first_disagreement->seq && s.op == rep.first_disagreement->op)
      continue;
    o << "also stuck: " << stuck_text(s) << "\n";
  }
  if (rep.desync.empty()) {
    o << "desync: none\n";
  } else {
    for (const DesyncCall& d : rep.desync) {
      o << "desync: '" << d.group << "' (group " << d.group_id << ") #" << d.seq << ":";
      for (std::size_t i = 0; i < d.variants.size(); ++i) o << (i ? "; " : " ") << variant_text(d.variants[i]);
      o << "\n";
    }
  }
  if (rep.straggler_steps == 0) {
    o << "stragglers: unknown (the dumps carry no step times)\n";
  } else if (rep.stragglers.empty()) {
    o << "stragglers: none (medians of the last " << rep.straggler_steps << " steps)\n";
  } else {
    for (const Straggler& s : rep.stragglers) {
      o << "straggler: " << describe_straggler(s) << " (medians of the last " << rep.straggler_steps << " steps)\n";
    }
  }
  o << "ranks:\n";
  for (const RankState& r : rep.ranks) {
    o << "  rank " << r.rank << ": last completed step "
      << (r.last_step ? std::to_string(*r.last_step) : std::string("unknown")) << (r.call ? ", in " : ", ") << r.in;
    if (!r.waits_for.empty()) o << ", waits for " << ranks_text(r.waits_for);
    if (!r.role.empty()) o << " [" << r.role << "]";
    o << "\n";
  }
  return o.str();
}

std::string trace_timeline_svg(const TraceReport& rep, const std::vector<RankDump>& dumps) {
  static const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2",
                                   "#edc948", "#9c755f", "#bab0ac", "#ff9da7", "#86bcb6"};
  std::map<std::string, std::string> colour;
  double t0 = 1e300, t1 = -1e300;
  for (const RankDump& d : dumps) {
    for (const DumpEntry& e : d.entries) {
      if (!colour.count(e.group)) colour[e.group] = kPalette[colour.size() % (sizeof kPalette / sizeof *kPalette)];
      t0 = std::min(t0, d.wall_t0_s + e.t_post);
    }
    t1 = std::max(t1, d.wall_t0_s + d.time_now_s);
  }
  if (t0 > t1) t0 = t1 = 0;
  const double span = std::max(t1 - t0, 1e-6);
  const int left = 90, width = 900, row = 26, top = 50;
  const int height = top + row * std::max(rep.world, 1) + 30 + 18 * static_cast<int>(colour.size());
  auto x_of = [&](double t) { return left + (t - t0) / span * width; };
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", v);
    return std::string(b);
  };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20 << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">"
    << xml_text("herd trace: job " + rep.job + ", culprit ranks " + ranks_text(rep.culprit_ranks)) << "</text>\n";
  o << "<text x=\"" << left << "\" y=\"38\">"
    << xml_text("wall-clock time, " + format_seconds(span) + " from the oldest recorded call to the last dump")
    << "</text>\n";
  for (int r = 0; r < rep.world; ++r) {
    const bool culprit = std::find(rep.culprit_ranks.begin(), rep.culprit_ranks.end(), r) != rep.culprit_ranks.end();
    const int y = top + r * row;
    o << "<text x=\"4\" y=\"" << y + 16 << "\"" << (culprit ? " fill=\"#d62728\" font-weight=\"bold\"" : "") << ">"
      << xml_text("rank " + std::to_string(r) + (culprit ? " (culprit)" : "")) << "</text>\n";
    o << "<line x1=\"" << left << "\" x2=\"" << left + width << "\" y1=\"" << y + row - 2 << "\" y2=\"" << y + row - 2
      << "\" stroke=\"#ddd\"/>\n";
  }
  for (const RankDump& d : dumps) {
    const int y = top + d.rank * row;
    const double now = d.wall_t0_s + d.time_now_s;
    // Calls still open overlap in time: each gets its own lane of the row, so every one stays visible.
    int open_calls = 0, lane = 0;
    for (const DumpEntry& e : d.entries) open_calls += e.completed() ? 0 : 1;
    for (const DumpEntry& e : d.entries) {
      const double a = d.wall_t0_s + e.t_post;
      const double b = e.t_end >= 0 ? d.wall_t0_s + e.t_end : now;
      const bool open = !e.completed();
      const double h = open ? static_cast<double>(row - 10) / open_calls : row - 10;
      const double top_y = open ? y + 4 + h * lane++ : y + 4;
      o << "<rect x=\"" << num(x_of(a)) << "\" y=\"" << num(top_y) << "\" width=\""
        << num(std::max(1.0, x_of(b) - x_of(a))) << "\" height=\"" << num(h) << "\" fill=\"" << colour[e.group] << "\""
        << (open ? " stroke=\"#d62728\" stroke-width=\"2\"" : "") << "><title>"
        << xml_text(describe_call(e) + ", " + e.state) << "</title></rect>\n";
    }
    if (!d.activity.empty()) {
      o << "<text x=\"" << left + width - 4 << "\" y=\"" << y + 16 << "\" text-anchor=\"end\" fill=\"#555\">"
        << xml_text(d.activity) << "</text>\n";
    }
  }
  int ly = top + row * std::max(rep.world, 1) + 20;
  for (const auto& [name, c] : colour) {
    o << "<rect x=\"" << left << "\" y=\"" << ly - 10 << "\" width=\"12\" height=\"12\" fill=\"" << c << "\"/>";
    o << "<text x=\"" << left + 18 << "\" y=\"" << ly << "\">" << xml_text("group '" + name + "'") << "</text>\n";
    ly += 18;
  }
  o << "<text x=\"" << left + 200 << "\" y=\"" << top + row * std::max(rep.world, 1) + 20
    << "\" fill=\"#d62728\">red outline: a call still open when the rank dumped</text>\n";
  o << "</svg>\n";
  return o.str();
}

}  // namespace herd::comm
