// Effective-training-time accounting of a supervised job (see ett.h).
#include "herd/train/job/ett.h"

#include <algorithm>
#include <fstream>
#include <set>

#include "herd/core/format.h"

namespace herd::train {

namespace {

double num(const Json& j, const char* key, double fallback = 0) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

std::string pct(double part, double whole) { return whole > 0 ? format_fixed(100.0 * part / whole, 1) + "%" : "-"; }

}  // namespace

EttSummary account_ett(const std::vector<Attempt>& attempts, double wall_start, double wall_end) {
  EttSummary s;
  s.wall_s = std::max(0.0, wall_end - wall_start);
  s.restarts = attempts.empty() ? 0 : static_cast<std::int64_t>(attempts.size()) - 1;
  // The job's full size: the most ranks any step ran on (records without "ranks" count as full).
  double full_ranks = 0;
  for (const Attempt& a : attempts) {
    for (const Json& r : a.records) full_ranks = std::max(full_ranks, num(r, "ranks"));
  }
  for (std::size_t k = 0; k < attempts.size(); ++k) {
    const Attempt& a = attempts[k];
    std::set<std::int64_t> redone_later;
    for (std::size_t l = k + 1; l < attempts.size(); ++l) {
      for (const Json& r : attempts[l].records) redone_later.insert(static_cast<std::int64_t>(num(r, "step")));
    }
    if (k > 0) s.backoff_s += std::max(0.0, a.start - attempts[k - 1].end);
    double& startup = k == 0 ? s.startup_s : s.restart_s;
    if (a.records.empty()) {
      startup += std::max(0.0, a.end - a.start);
      continue;
    }
    const Json& first = a.records.front();
    const double first_start = std::clamp(num(first, "time") - num(first, "step_s"), a.start, a.end);
    startup += first_start - a.start;
    double prev = first_start;
    for (const Json& r : a.records) {
      const double t = std::clamp(num(r, "time"), prev, a.end);
      const double interval = t - prev;
      prev = t;
      const auto step = static_cast<std::int64_t>(num(r, "step"));
      s.steps = std::max(s.steps, step);
      if (redone_later.count(step)) {
        s.lost_s += interval;
        ++s.redone_steps;
      } else {
        const double ck = std::clamp(num(r, "checkpoint_s"), 0.0, interval);
        s.checkpoint_s += ck;
        s.productive_s += interval - ck;
        if (num(r, "ranks") > 0 && num(r, "ranks") < full_ranks) {
          s.degraded_s += interval - ck;
          ++s.degraded_steps;
        }
      }
    }
    // After the last step: lost when the attempt failed, the run's end otherwise.
    if (a.exit_code != 0 && a.exit_code != 143 && a.exit_code != 130) s.lost_s += a.end - prev;
  }
  const double known = s.productive_s + s.lost_s + s.restart_s + s.startup_s + s.checkpoint_s + s.backoff_s;
  s.other_s = std::max(0.0, s.wall_s - known);
  return s;
}

Json EttSummary::to_json() const {
  return Json{{"ett", ett()},
              {"restarts", restarts},
              {"lost_s", lost_s},
              {"restart_s", restart_s},
              {"startup_s", startup_s},
              {"productive_s", productive_s},
              {"checkpoint_s", checkpoint_s},
              {"backoff_s", backoff_s},
              {"other_s", other_s},
              {"wall_s", wall_s},
              {"steps", steps},
              {"redone_steps", redone_steps},
              {"degraded_s", degraded_s},
              {"degraded_steps", degraded_steps}};
}

std::vector<std::string> EttSummary::lines() const {
  auto row = [&](const char* what, double v) {
    return std::string(what) + format_seconds(v) + " (" + pct(v, wall_s) + ")";
  };
  std::vector<std::string> out = {"wall time      " + format_seconds(wall_s) + ", " + std::to_string(restarts) +
                                      " restart(s), " + std::to_string(steps) + " steps, " +
                                      std::to_string(redone_steps) + " redone",
                                  row("productive     ", productive_s)};
  if (degraded_steps > 0) {
    out.push_back(row("  of which on fewer ranks ", degraded_s) + ", " + std::to_string(degraded_steps) +
                  " steps after an elastic restart");
  }
  for (const std::string& r :
       {row("lost (redone)  ", lost_s), row("startup        ", startup_s), row("restarts       ", restart_s),
        row("checkpoints    ", checkpoint_s), row("backoff        ", backoff_s), row("other          ", other_s)}) {
    out.push_back(r);
  }
  out.push_back("ETT " + pct(productive_s, wall_s) + " (productive " + format_seconds(productive_s) + " of " +
                format_seconds(wall_s) + " wall)");
  return out;
}

std::vector<Json> read_step_records(const std::string& metrics_file, double since) {
  std::vector<Json> out;
  std::ifstream in(metrics_file);
  for (std::string line; std::getline(in, line);) {
    const Result<Json> r = parse_json_text(line, metrics_file);
    if (!r.ok()) continue;
    const Json& j = *r;
    if (!j.is_object() || !j.contains("step") || !j.contains("time")) continue;
    if (num(j, "time") >= since) out.push_back(j);
  }
  return out;
}

}  // namespace herd::train
