// Reports of an estimate: the JSON other tools read (field names fixed by the planner issue: fits, mfu,
// tflops_per_gpu, tokens_per_s, step_time_s, memory, time, layout; and its reliability), and a picture a person would
// rather look at than read: stacked bars for memory and step time and the pipeline timeline, as SVG
// or as a self-contained HTML page.
#pragma once

#include <string>

#include "herd/core/json.h"
#include "herd/planner/band.h"
#include "herd/planner/estimate.h"
#include "herd/planner/reliability.h"
#include "herd/planner/search.h"

namespace herd::planner {

Json estimate_to_json(const Estimate& e);
// The `reliability` object of `herd estimate --json` and of each `herd plan --json` entry (field names
// fixed by the fault-tolerance issue: ett, checkpoint_interval_s, interruptions_per_day), with
// `replacement` {ett, restart_s, wall_time_shares} and, when projected, `elastic` {possible, ett,
// degraded_layout, degraded_step_s, slowdown, restart_s, repair_s, wall_time_shares, ...}.
Json reliability_to_json(const Reliability& r);
// `herd estimate --json`'s `chosen` object: knob -> {value, given, why[, runner_up]}, one entry per
// knob the search knows (planner/search.h), and its `search` object (variants costed, fitting,
// simulated, and when nothing fits, what would).
// The step-time band's fields of `herd estimate --json` and of each `herd plan --json` entry:
// step_time_band_s {p10, p90}; tokens_per_s_band and mfu_band {p10, p90} (tokens / step and MFU at the
// band's p90 and p10 step); ett_band {p10, p90}, the effective training time at the band's two ends
// (lower, higher); band_sources, what each source contributes (docs/planner.md section 5.1).
void add_band_json(Json& j, const StepBand& b, const Estimate& e, const topology::Cluster& cluster,
                   const ReliabilitySpec& spec);
Json chosen_to_json(const FamilyChoice& c);
Json family_search_to_json(const FamilyChoice& c);
std::string report_svg(const Estimate& e, const std::string& title);
std::string report_html(const Estimate& e, const std::string& title);

}  // namespace herd::planner
