// herd plan: search every valid layout, print the top K by step time (with each one's effective
// training time), the winner's reliability, why each rejected family of degrees failed, and
// (--explain) the winner's full estimate.
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "herd/cli/app.h"
#include "herd/cli/planner_options.h"
#include "herd/cli/table.h"
#include "herd/core/format.h"
#include "herd/core/json_text.h"
#include "herd/planner/reliability.h"
#include "herd/planner/report.h"
#include "herd/planner/search.h"

namespace herd::cli {

void print_estimate(std::ostream& os, const planner::Estimate& e, const PlannerInputs& in,
                    const planner::StepBand& band);
void print_reliability(std::ostream& os, const planner::Reliability& r);

namespace {

struct PlanOptions {
  PlannerOptions p;
  int top = 10;
  bool explain = false;
  int max_rejected = 30;
};

int run_plan(const PlanOptions& o) {
  Result<PlannerInputs> in = resolve_planner_inputs(o.p);
  if (!in.ok()) return report_error("plan", in.error());
  const planner::SearchSpace space = search_space(o.p, *in);
  Result<planner::PlanResult> r = planner::plan(in->cfg, in->cluster, in->train, o.p.gpus, space, o.top);
  if (!r.ok()) return report_error("plan", r.error());
  if (r->ranked.empty()) {
    const std::string why = r->rejected.empty() ? "no family was valid" : r->rejected.back().reason;
    return report_error("plan", make_error("none of the ", r->families, " (tp, cp, pp, dp) families of ", o.p.gpus,
                                           " GPUs gives a layout of ", in->cfg.name, " that fits ",
                                           in->cluster.accelerator.name, "; e.g. ", why, ""));
  }
  if (!o.p.svg.empty() || !o.p.html.empty()) {
    planner::EstimateOptions eo;
    eo.keep_timeline = true;
    Result<planner::Estimate> best =
        planner::estimate(in->cfg, in->cluster, in->train, r->ranked.front().layout, o.p.gpus, eo);
    if (!best.ok()) return report_error("plan", best.error());
    const std::string title =
        "herd plan winner: " + in->cfg.name + " on " + std::to_string(o.p.gpus) + " x " + in->cluster.accelerator.name;
    if (!o.p.svg.empty()) {
      if (Status s = write_text_file(o.p.svg, planner::report_svg(*best, title)); !s.ok())
        return report_error("plan", s.error());
    }
    if (!o.p.html.empty()) {
      if (Status s = write_text_file(o.p.html, planner::report_html(*best, title)); !s.ok())
        return report_error("plan", s.error());
    }
  }
  // What the job runs after losing a node (elastic recovery), the same for every ranked layout.
  const planner::DegradedLayout degraded = planner::degraded_layout(in->cfg, in->cluster, in->train, o.p.gpus, space);
  // Every layout's step-time band; the ranking stays by the point estimate, and layouts whose bands
  // overlap are marked (their order is within the planner's uncertainty).
  std::vector<planner::StepBand> bands;
  for (const planner::Estimate& e : r->ranked) {
    Result<planner::BandSources> s = planner::band_sources(in->cfg, in->cluster, in->train, e, in->software_given);
    if (!s.ok()) return report_error("plan", s.error());
    bands.push_back(planner::step_band(e.time.step_s, *s));
  }
  if (o.p.json) {
    Json list = Json::array();
    for (std::size_t i = 0; i < r->ranked.size(); ++i) {
      const planner::Estimate& e = r->ranked[i];
      Json j = planner::estimate_to_json(e);
      j["rank"] = static_cast<int>(i) + 1;
      j["reliability"] =
          planner::reliability_to_json(planner::project_reliability(e, in->cluster, in->reliability, &degraded));
      planner::add_band_json(j, bands[i], e, in->cluster, in->reliability);
      j["band_overlaps"] = planner::overlapping_ranks(bands, i);
      list.push_back(j);
    }
    std::cout << json_text(list, 2) << "\n";
    return 0;
  }
  std::cout << "herd plan: " << in->cfg.name << " on " << o.p.gpus << " x " << in->cluster.accelerator.name << " ("
            << in->cluster.name << "), " << in->train.global_batch << " x " << in->train.seq_len
            << " tokens per step\n";
  std::cout << r->families << " families of degrees, " << r->layouts_costed << " layouts costed, " << r->layouts_fitting
            << " within memory, " << r->layouts_pruned << " skipped by the step-time bound, " << r->layouts_simulated
            << " simulated; search " << format_fixed(r->search_s, 3) << " s\n\n";
  Table t({"#",  "tp",     "cp",        "pp",       "dp",          "v",   "mb",     "M",      "N",         "recompute",
           "sp", "step s", "p10-p90 s", "tokens/s", "TFLOP/s/GPU", "MFU", "memory", "bubble", "exp. comm", "ETT"});
  int i = 0;
  for (const planner::Estimate& e : r->ranked) {
    const planner::Layout& l = e.layout;
    const planner::StepBand& b = bands[static_cast<std::size_t>(i)];
    t.add({std::to_string(++i),
           std::to_string(l.tp),
           std::to_string(l.cp),
           std::to_string(l.pp),
           std::to_string(l.dp),
           std::to_string(l.v),
           std::to_string(l.microbatch),
           std::to_string(e.microbatches),
           std::to_string(e.n),
           model::recompute_name(l.recompute),
           l.sp() ? "yes" : "no",
           format_fixed(e.time.step_s, 3),
           format_fixed(b.p10_s, 3) + "-" + format_fixed(b.p90_s, 3),
           format_fixed(e.tokens_per_s, 0),
           format_fixed(e.tflops_per_gpu, 0),
           format_fixed(100 * e.mfu, 1) + "%",
           format_bytes(e.memory.total_bytes),
           format_fixed(100 * e.time.bubble_s / e.time.step_s, 1) + "%",
           format_fixed(100 * e.time.exposed_comm_s() / e.time.step_s, 1) + "%",
           format_fixed(100 * planner::project_reliability(e, in->cluster, in->reliability).chosen().shares.productive,
                        2) +
               "%"});
  }
  t.print(std::cout);
  if (bands.size() > 1) {
    std::cout << "Ranked by the point estimate; p10-p90 is the step-time band (docs/planner.md section 5.1).\n"
              << planner::band_overlap_note(bands) << "\n";
  }
  // The winner as flags: `herd estimate` and `herd train` take this line as it is.
  std::cout << "\nlayout #1: " << r->ranked.front().layout.to_flags() << " --seq-len " << in->train.seq_len
            << " --global-batch " << in->train.global_batch << "\n";
  print_reliability(std::cout,
                    planner::project_reliability(r->ranked.front(), in->cluster, in->reliability, &degraded));
  if (!r->rejected.empty()) {
    std::cout << "\nRejected families (" << r->rejected.size() << ")\n";
    Table rej({"tp", "cp", "pp", "dp", "reason"});
    int shown = 0;
    for (const planner::Rejection& x : r->rejected) {
      if (++shown > o.max_rejected) break;
      rej.add({std::to_string(x.tp), std::to_string(x.cp), std::to_string(x.pp), std::to_string(x.dp), x.reason});
    }
    rej.print(std::cout);
    if (static_cast<int>(r->rejected.size()) > o.max_rejected) {
      std::cout << "... and " << r->rejected.size() - static_cast<std::size_t>(o.max_rejected)
                << " more (--max-rejected to show them)\n";
    }
  }
  if (o.explain) {
    std::cout << "\nWinner, explained\n\n";
    print_estimate(std::cout, r->ranked.front(), *in, bands.front());
  }
  return 0;
}

}  // namespace

Subcommand add_plan_command(CLI::App& root) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* app = root.add_subcommand("plan", "Search every valid 4D layout and rank them by step time");
  add_planner_options(app, o->p);
  app->add_option("--top", o->top, "How many layouts to print")->capture_default_str()->check(positive_integer());
  app->add_flag("--explain", o->explain, "Print the winner's full memory and time breakdown");
  app->add_option("--max-rejected", o->max_rejected, "Rejected families to list")->capture_default_str();
  return {app, [o] { return run_plan(*o); }};
}

}  // namespace herd::cli
