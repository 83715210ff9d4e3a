// Rendering a TraceReport (trace_analysis.h): plain text, JSON and an SVG timeline.
//
// The JSON is the interface other tools read: `culprit_ranks` (global ranks), `desync` (a list, empty
// when none), `ranks` (per rank: `last_step`, the last completed step or null, and `call`, the call it
// is in or null when outside communication, with `in` saying the same in words), plus `stuck`,
// `first_disagreement` and `missing_dumps`. The SVG draws each rank's recorded calls against wall-clock
// time, coloured by group name, with the calls still open at the dump outlined in red and the culprit
// ranks' labels in red; all text passes through core/xml.h.
#pragma once

#include <string>
#include <vector>

#include "herd/comm/trace_analysis.h"
#include "herd/core/json.h"

namespace herd::comm {

Json trace_report_json(const TraceReport& rep);
std::string trace_report_text(const TraceReport& rep);
std::string trace_timeline_svg(const TraceReport& rep, const std::vector<RankDump>& dumps);

}  // namespace herd::comm
