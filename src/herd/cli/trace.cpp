// herd trace DIR: reads every rank's flight-recorder dump of one job and says who hung the job (the
// culprit, not the victims of the cascade), which call the ranks disagree on, any desync, and where
// each rank stopped; with --plan, each rank against its planned step. The analysis is comm/trace_analysis.h
// and comm/trace_plan.h; this file only reads options and writes.
#include <fstream>
#include <iostream>
#include <optional>

#include "herd/cli/app.h"
#include "herd/comm/trace_analysis.h"
#include "herd/comm/trace_plan.h"
#include "herd/comm/trace_report.h"
#include "herd/core/file_write.h"
#include "herd/core/json_text.h"

namespace herd::cli {

namespace {

struct TraceOptions {
  std::string dir;
  bool json = false;
  std::string svg;
  std::string job;
  std::string plan;
};

int run_trace(const TraceOptions& o) {
  Result<comm::JobDumps> dumps = comm::read_job_dumps(o.dir, o.job);
  if (!dumps.ok()) return report_error("trace", dumps.error());
  for (const std::string& w : dumps->warnings) std::cerr << "herd trace: warning: " << w << "\n";
  const comm::TraceReport rep = comm::analyze_dumps(dumps->ranks, dumps->job);
  std::optional<comm::PlannedSteps> plan;
  std::optional<comm::PlanComparison> against;
  if (!o.plan.empty()) {
    Result<comm::PlannedSteps> p = comm::read_planned_steps(o.plan);
    if (!p.ok()) return report_error("trace", p.error());
    Result<comm::PlanComparison> c = comm::compare_with_plan(dumps->ranks, *p);
    if (!c.ok()) return report_error("trace", c.error());
    plan = *p;
    against = *c;
  }
  if (!o.svg.empty()) {
    if (Status s = write_file(o.svg, comm::trace_timeline_svg(rep, dumps->ranks)); !s.ok()) {
      return report_error("trace", make_error("--svg: ", s.error().message(), "; give a writable file"));
    }
    std::cerr << "wrote " << o.svg << "\n";
  }
  if (!dumps->other_jobs.empty() && o.job.empty()) {
    std::cerr << "herd trace: " << dumps->other_jobs.size() << " other job(s) have dumps in " << o.dir
              << "; reading the newest, " << dumps->job << " (--job picks another)\n";
  }
  if (o.json) {
    Json j = comm::trace_report_json(rep);
    if (against) j["plan"] = comm::plan_comparison_json(*against, *plan);
    std::cout << json_text(j, 2) << "\n";
  } else {
    std::cout << comm::trace_report_text(rep);
    if (against) std::cout << comm::plan_comparison_text(*against, *plan);
  }
  return 0;
}

}  // namespace

Subcommand add_trace_command(CLI::App& root) {
  auto opts = std::make_shared<TraceOptions>();
  CLI::App* app = root.add_subcommand(
      "trace", "Analyze a job's flight-recorder dumps: the culprit of a hang, desyncs, each rank's call");
  app->add_option("dir", opts->dir, "Directory holding herd_flight_<job>_rank<r>.json (the run's diagnostics.dir)")
      ->required();
  app->add_flag("--json", opts->json, "Print the analysis as JSON (culprit_ranks, desync, ranks, stuck, ...)");
  app->add_option("--svg", opts->svg, "Also write a timeline of every rank's recorded calls to this SVG file");
  app->add_option("--job", opts->job, "The job id whose dumps to read (default: the newest job in DIR)");
  app->add_option("--plan", opts->plan,
                  "The run's train.projection_file: set each rank's measured step beside its stage's planned one "
                  "and name the stage or rank that departs most");
  return {app, [opts] { return run_trace(*opts); }};
}

}  // namespace herd::cli
