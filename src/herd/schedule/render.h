// Drawing a simulated schedule: an ASCII timeline for the terminal and an SVG in the style of the
// Llama 3 paper's Figure 6 (one row per pipeline rank, colour by micro-batch, forward light and
// backward dark, idle time left empty and hatched so the bubble is visible). Both take the timeline of
// simulate(), so they draw what the simulator computed, costs and latencies included. The planner's
// report embeds render_svg() output.
#pragma once

#include <string>

#include "herd/schedule/simulate.h"

namespace herd::schedule {

// Two lines per rank: forwards on the first, backwards on the second; each cell shows the micro-batch
// (base 36: 0-9, then a-z) running at that time, blank when idle. One column stands for
// step_time / columns time units, at most `max_columns` columns, and exactly one unit when it fits.
std::string render_ascii(const Schedule& schedule, const SimResult& sim, int max_columns = 120);

struct SvgOptions {
  std::string title;                     // empty: the schedule, its step time and bubble
  std::string time_unit = "time units";  // axis label, e.g. "units of one layer's forward" or "s"
  int width = 1200;                      // pixels, plot and margins
  int row_height = 30;
  bool label_microbatches = true;  // micro-batch number inside boxes wide enough for it
};

// A standalone SVG document (starts with <svg ...>, no XML prolog needed).
std::string render_svg(const Schedule& schedule, const SimResult& sim, const SvgOptions& options = {});

}  // namespace herd::schedule
