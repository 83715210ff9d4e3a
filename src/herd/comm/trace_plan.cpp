// The trace against the plan (trace_plan.h).
#include "herd/comm/trace_plan.h"

#include <algorithm>
#include <sstream>

#include "herd/core/format.h"
#include "herd/core/stats.h"

namespace herd::comm {

Result<PlannedSteps> read_planned_steps(const std::string& projection_file) {
  HERD_ASSIGN_OR_RETURN(const Json j, read_json_file(projection_file));
  auto fail = [&](const Error& e) {
    return e.with_context("--plan " + projection_file + " (a train.projection_file of the run)");
  };
  if (!j.is_object() || !j.contains("planned") || !j["planned"].is_object()) {
    return fail(make_error("no \"planned\" object"));
  }
  const Json& p = j["planned"];
  PlannedSteps plan;
  plan.source = projection_file;
  Result<double> step = json_number(p, "planned", "step_s");
  if (!step.ok()) return fail(step.error());
  plan.step_s = *step;
  Result<double> opt = json_number_or(p, "planned", "optimizer_s", 0.0);
  if (!opt.ok()) return fail(opt.error());
  plan.optimizer_s = *opt;
  if (!p.contains("pipeline_rank_busy_s") || !p["pipeline_rank_busy_s"].is_array() ||
      p["pipeline_rank_busy_s"].empty()) {
    return fail(
        make_error("planned.pipeline_rank_busy_s: missing or empty; write the file with this herd's "
                   "train.projection_file"));
  }
  for (const Json& v : p["pipeline_rank_busy_s"]) {
    if (!v.is_number() || !(v.get<double>() >= 0)) {
      return fail(make_error("planned.pipeline_rank_busy_s: expected seconds >= 0, got ", json_preview(v)));
    }
    plan.stage_busy_s.push_back(v.get<double>());
  }
  return plan;
}

Result<PlanComparison> compare_with_plan(const std::vector<RankDump>& dumps, const PlannedSteps& plan) {
  PlanComparison c;
  const std::vector<RankStepTimes> times = dump_step_times(dumps, &c.steps);
  if (times.empty()) {
    return make_error(
        "--plan: no dump carries step times (a job dumps them every diagnostics.dump_every steps "
        "and when it fails after a step)");
  }
  std::vector<double> ratios;
  for (const RankStepTimes& t : times) {
    if (t.stage < 0 || t.stage >= static_cast<int>(plan.stage_busy_s.size())) {
      return make_error("--plan: rank ", t.rank, " is in pipeline stage ", t.stage, " but ", plan.source, " plans ",
                        plan.stage_busy_s.size(), " stage(s); give the projection file of this job");
    }
    RankVsPlan r;
    r.rank = t.rank;
    r.stage = t.stage;
    r.planned_s = plan.stage_busy_s[static_cast<std::size_t>(t.stage)] + plan.optimizer_s;
    r.measured_s = t.busy_s + t.stall_s;
    r.planned_wait_s = std::max(0.0, plan.step_s - r.planned_s);
    r.wait_s = t.wait_s;
    if (r.planned_s > 0 && r.measured_s > 0) ratios.push_back(r.measured_s / r.planned_s);
    c.ranks.push_back(r);
  }
  std::sort(c.ranks.begin(), c.ranks.end(), [](const RankVsPlan& a, const RankVsPlan& b) { return a.rank < b.rank; });
  c.median_ratio = ratios.empty() ? 0 : median(ratios);
  const RankVsPlan* worst = nullptr;
  for (RankVsPlan& r : c.ranks) {
    r.departure = c.median_ratio > 0 && r.planned_s > 0 ? r.measured_s / r.planned_s / c.median_ratio : 0;
    if (worst == nullptr || r.departure > worst->departure) worst = &r;
  }
  std::ostringstream f;
  if (worst == nullptr || worst->departure < kPlanDepartureThreshold) {
    f << "no rank departs from the plan by " << format_fixed(100 * (kPlanDepartureThreshold - 1), 0)
      << "% or more beyond the run's " << format_fixed(c.median_ratio, 2) << "x of it";
    c.finding = f.str();
    return c;
  }
  c.departing_rank = worst->rank;
  // The stage departs when every one of its ranks does; a stage of one rank (no data or tensor peers)
  // cannot tell its rank from its work, and is named as the rank.
  std::vector<double> stage;
  for (const RankVsPlan& r : c.ranks) {
    if (r.stage == worst->stage) stage.push_back(r.departure);
  }
  if (stage.size() > 1 && *std::min_element(stage.begin(), stage.end()) >= kPlanDepartureThreshold) {
    c.departing_stage = worst->stage;
  }
  if (c.departing_stage >= 0) {
    f << "pipeline stage " << c.departing_stage << " departs most from the plan: its ranks take "
      << format_fixed(median(stage), 2) << "x their planned time (beyond the run's " << format_fixed(c.median_ratio, 2)
      << "x); its work is not what the plan costs";
  } else {
    f << "rank " << worst->rank << " (stage " << worst->stage
      << ") departs most from the plan: " << format_seconds(worst->measured_s) << " a step against "
      << format_seconds(worst->planned_s) << " planned, " << format_fixed(worst->departure, 2) << "x beyond the run's "
      << format_fixed(c.median_ratio, 2) << "x of the plan";
  }
  c.finding = f.str();
  return c;
}

std::string plan_comparison_text(const PlanComparison& c, const PlannedSteps& plan) {
  std::ostringstream o;
  o << "against the plan (" << plan.source << "; step " << format_seconds(plan.step_s) << " planned; medians of "
    << c.steps << " steps):\n";
  for (const RankVsPlan& r : c.ranks) {
    o << "  rank " << r.rank << " stage " << r.stage << ": own time " << format_seconds(r.measured_s) << " vs "
      << format_seconds(r.planned_s) << " planned (" << format_fixed(r.departure, 2) << "x the run's ratio), wait "
      << format_seconds(r.wait_s) << " vs " << format_seconds(r.planned_wait_s) << " planned\n";
  }
  o << c.finding << "\n";
  return o.str();
}

Json plan_comparison_json(const PlanComparison& c, const PlannedSteps& plan) {
  Json ranks = Json::array();
  for (const RankVsPlan& r : c.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"stage", r.stage},
                     {"planned_s", r.planned_s},
                     {"measured_s", r.measured_s},
                     {"departure", r.departure},
                     {"planned_wait_s", r.planned_wait_s},
                     {"wait_s", r.wait_s}});
  }
  return {{"source", plan.source},
          {"steps", c.steps},
          {"median_ratio", c.median_ratio},
          {"departing_rank", c.departing_rank},
          {"departing_stage", c.departing_stage},
          {"finding", c.finding},
          {"ranks", ranks}};
}

}  // namespace herd::comm
