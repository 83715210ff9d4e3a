// ASCII and SVG timelines of a simulated schedule (render.h).
#include "herd/schedule/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "herd/core/xml.h"

namespace herd::schedule {

namespace {

constexpr char kBase36[] = "0123456789abcdefghijklmnopqrstuvwxyz";

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

// 1, 2 or 5 times a power of ten, so that about `target` ticks cover `span`.
double nice_step(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

std::string tick_label(double t, double step) {
  return step >= 1 ? fixed(t, 0) : fixed(t, static_cast<int>(std::ceil(-std::log10(step))));
}

std::string header(const Schedule& s, const SimResult& sim) {
  const ScheduleSpec& p = s.spec;
  std::string h = std::string(schedule_kind_name(p.kind)) + " PP=" + std::to_string(p.pp) +
                  " V=" + std::to_string(p.v) + " M=" + std::to_string(p.microbatches);
  if (p.kind == ScheduleKind::kFlexible || p.kind == ScheduleKind::kInterleaved) h += " N=" + std::to_string(p.n);
  h += ": step " + fixed(sim.step_time, 2) + ", bubble " + fixed(100 * sim.bubble_fraction, 1) + "% of the step";
  return h;
}

}  // namespace

std::string render_ascii(const Schedule& s, const SimResult& sim, int max_columns) {
  max_columns = std::max(max_columns, 10);
  const double step = sim.step_time;
  // One column per time unit when it fits, else the next 1-2-2.5-5 step, so the axis reads in round numbers.
  double scale = 1.0;
  while (std::ceil(step / scale - 1e-9) > max_columns) {
    const double mant = scale / std::pow(10.0, std::floor(std::log10(scale) + 1e-9));
    scale *= mant < 1.5 ? 2.0 : (mant < 2.25 ? 1.25 : 2.0);  // 1, 2, 2.5, 5, 10, 20, 25, ...
  }
  const int cols = std::max(1, static_cast<int>(std::ceil(step / scale - 1e-9)));
  std::ostringstream os;
  const int pp = s.spec.pp;
  const int label_w = static_cast<int>(std::to_string(pp - 1).size()) + 9;  // "rank 12 F |"
  for (int r = 0; r < pp; ++r) {
    std::string fwd(cols, ' '), bwd(cols, ' ');
    for (const Interval& iv : sim.timeline[r]) {
      const Action& a = s.ranks[r][iv.action];
      int c0 = static_cast<int>(std::floor(iv.start / scale + 0.5));
      int c1 = static_cast<int>(std::floor(iv.end / scale + 0.5));
      c0 = std::clamp(c0, 0, cols - 1);
      c1 = std::clamp(std::max(c1, c0 + 1), 0, cols);
      std::string& line = a.type == ActionType::kForward ? fwd : bwd;
      for (int c = c0; c < c1; ++c) line[c] = kBase36[a.microbatch % 36];
    }
    std::string label = "rank " + std::to_string(r);
    label.resize(label_w - 3, ' ');
    os << label << "F |" << fwd << "|\n" << std::string(label_w - 3, ' ') << "B |" << bwd << "|\n";
  }
  // Axis: a tick every ten columns, labelled in time units.
  std::string axis(cols + 1, '-'), labels(cols + 12, ' ');
  for (int c = 0; c <= cols; c += 10) {
    axis[c] = '+';
    const std::string t = tick_label(c * scale, 10 * scale);
    for (std::size_t i = 0; i < t.size() && c + i < labels.size(); ++i) labels[c + i] = t[i];
  }
  while (!labels.empty() && labels.back() == ' ') labels.pop_back();
  os << std::string(label_w - 1, ' ') << axis << "\n" << std::string(label_w - 1, ' ') << labels << "\n";
  os << "F: forward, B: backward; each cell is the micro-batch running (0-9, a-z, mod 36), blank is idle; one column = "
     << (scale == std::floor(scale) ? fixed(scale, 0) : fixed(scale, 1)) << " time unit" << (scale == 1.0 ? "" : "s")
     << "\n";
  return os.str();
}

std::string render_svg(const Schedule& s, const SimResult& sim, const SvgOptions& o) {
  const int pp = s.spec.pp, n_mb = s.spec.microbatches;
  const double left = 78, right = 24, top = 56, gap = 8, row = o.row_height;
  const double plot_w = std::max(100.0, o.width - left - right);
  const double plot_h = pp * row + (pp - 1) * gap;
  const double axis_y = top + plot_h + 6;
  const double height = axis_y + 76;
  const double step = sim.step_time > 0 ? sim.step_time : 1;
  auto x_of = [&](double t) { return left + t / step * plot_w; };
  // Micro-batch hues around the colour wheel; golden-angle steps keep neighbours apart for large M.
  auto hue = [&](int mb) { return n_mb <= 12 ? 360.0 * mb / std::max(n_mb, 1) : std::fmod(mb * 137.50776, 360.0); };

  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\"" << fixed(height, 0)
     << "\" viewBox=\"0 0 " << o.width << " " << fixed(height, 0)
     << "\" font-family=\"Helvetica, Arial, sans-serif\">\n"
     << "<defs><pattern id=\"idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
        "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fafafa\"/>"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d0d0d0\" stroke-width=\"2\"/></pattern></defs>\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << left << "\" y=\"26\" font-size=\"16\" font-weight=\"bold\">"
     << xml_text(o.title.empty() ? header(s, sim) : o.title) << "</text>\n";

  for (int r = 0; r < pp; ++r) {
    const double y = top + r * (row + gap);
    os << "<text x=\"" << left - 10 << "\" y=\"" << fixed(y + row / 2 + 4, 1)
       << "\" font-size=\"13\" text-anchor=\"end\">rank " << r << "</text>\n"
       << "<rect x=\"" << left << "\" y=\"" << y << "\" width=\"" << fixed(plot_w, 1) << "\" height=\"" << row
       << "\" fill=\"url(#idle)\" stroke=\"#bbbbbb\" stroke-width=\"0.5\"/>\n";
    for (const Interval& iv : sim.timeline[r]) {
      const Action& a = s.ranks[r][iv.action];
      const bool fwd = a.type == ActionType::kForward;
      const double x0 = x_of(iv.start), w = std::max(0.5, x_of(iv.end) - x0);
      const std::string fill = "hsl(" + fixed(hue(a.microbatch), 1) + (fwd ? ",70%,80%)" : ",60%,34%)");
      os << "<rect x=\"" << fixed(x0, 2) << "\" y=\"" << y << "\" width=\"" << fixed(w, 2) << "\" height=\"" << row
         << "\" fill=\""
         << fill
         // A white edge separates wide boxes; on boxes a few pixels wide it would wash out the colour.
         << (w > 4 ? "\" stroke=\"white\" stroke-width=\"0.8" : "\" stroke=\"none") << "\"><title>"
         << (fwd ? "forward" : "backward") << " micro-batch " << a.microbatch << ", stage " << a.stage << " (chunk "
         << a.stage / pp << "), " << fixed(iv.start, 2) << " - " << fixed(iv.end, 2) << "</title></rect>\n";
      const std::string label = std::to_string(a.microbatch);
      if (o.label_microbatches && w >= 7.5 * static_cast<double>(label.size()) + 3) {
        os << "<text x=\"" << fixed(x0 + w / 2, 2) << "\" y=\"" << fixed(y + row / 2 + 4, 1)
           << "\" font-size=\"11\" text-anchor=\"middle\" fill=\"" << (fwd ? "#222" : "white") << "\">" << label
           << "</text>\n";
      }
    }
  }

  // Time axis.
  const double tick = nice_step(step, 12);
  os << "<line x1=\"" << left << "\" y1=\"" << axis_y << "\" x2=\"" << fixed(left + plot_w, 1) << "\" y2=\"" << axis_y
     << "\" stroke=\"#333\"/>\n";
  for (double t = 0; t <= step + 1e-9; t += tick) {
    const double x = x_of(t);
    os << "<line x1=\"" << fixed(x, 2) << "\" y1=\"" << axis_y << "\" x2=\"" << fixed(x, 2) << "\" y2=\"" << axis_y + 5
       << "\" stroke=\"#333\"/><text x=\"" << fixed(x, 2) << "\" y=\"" << axis_y + 18
       << "\" font-size=\"11\" text-anchor=\"middle\">" << tick_label(t, tick) << "</text>\n";
  }
  os << "<text x=\"" << fixed(left + plot_w / 2, 1) << "\" y=\"" << axis_y + 36
     << "\" font-size=\"12\" text-anchor=\"middle\">time (" << xml_text(o.time_unit) << ")</text>\n";

  // Legend.
  const double ly = axis_y + 50;
  const double h0 = hue(0);
  os << "<g font-size=\"12\">"
     << "<rect x=\"" << left << "\" y=\"" << ly << "\" width=\"22\" height=\"14\" fill=\"hsl(" << fixed(h0, 1)
     << ",70%,80%)\"/><text x=\"" << left + 28 << "\" y=\"" << ly + 11 << "\">forward</text>"
     << "<rect x=\"" << left + 100 << "\" y=\"" << ly << "\" width=\"22\" height=\"14\" fill=\"hsl(" << fixed(h0, 1)
     << ",60%,34%)\"/><text x=\"" << left + 128 << "\" y=\"" << ly + 11 << "\">backward</text>"
     << "<rect x=\"" << left + 210 << "\" y=\"" << ly << "\" width=\"22\" height=\"14\" fill=\"url(#idle)\" "
     << "stroke=\"#bbbbbb\"/><text x=\"" << left + 238 << "\" y=\"" << ly + 11 << "\">idle (bubble)</text>"
     << "<text x=\"" << left + 340 << "\" y=\"" << ly + 11
     << "\">colour and number: micro-batch; hover a box for its stage and times</text></g>\n";
  os << "</svg>\n";
  return os.str();
}

}  // namespace herd::schedule
