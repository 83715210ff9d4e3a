// herd trace DIR: reads every rank's flight-recorder dump of one job and says who hung the job (the
// culprit, not the victims of the cascade), which call the ranks disagree on, any desync, and where
// each rank stopped. The analysis is comm/trace_analysis.h; this file only reads options and writes.
#include <fstream>
#include <iostream>

#include "herd/cli/app.h"
#include "herd/comm/trace_analysis.h"
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
};

int run_trace(const TraceOptions& o) {
  Result<comm::JobDumps> dumps = comm::read_job_dumps(o.dir, o.job);
  if (!dumps.ok()) return report_error("trace", dumps.error());
  for (const std::string& w : dumps->warnings) std::cerr << "herd trace: warning: " << w << "\n";
  const comm::TraceReport rep = comm::analyze_dumps(dumps->ranks, dumps->job);
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
    std::cout << json_text(comm::trace_report_json(rep), 2) << "\n";
  } else {
    std::cout << comm::trace_report_text(rep);
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
  return {app, [opts] { return run_trace(*opts); }};
}

}  // namespace herd::cli
