// SVG rendering of loss curves: linear axes with rounded ticks, no external dependencies.
#include "herd/cli/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "herd/core/json.h"
#include "herd/core/xml.h"

namespace herd::cli {

Result<LossCurves> read_loss_curves(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  if (!in) return make_error(metrics_path, ": cannot open the metrics file; check the path");
  LossCurves c;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = metrics_path + ":" + std::to_string(n);
    HERD_ASSIGN_OR_RETURN(Json j, parse_json_text(line, where));
    // A step the NaN guard skipped has no finite loss (written as null): not a point of the curve.
    if (j.is_object() &&
        ((j.contains("skipped") && j["skipped"] == true) || (j.contains("loss") && j["loss"].is_null())))
      continue;
    // Records that are not steps (the supervisor's closing {"ett": ...} summary) are not plotted.
    if (j.is_object() && !j.contains("step") && j.contains("ett")) continue;
    HERD_ASSIGN_OR_RETURN(double step, json_number(j, where, "step"));
    HERD_ASSIGN_OR_RETURN(double loss, json_number(j, where, "loss"));
    c.train.push_back({step, loss});
    if (j.contains("unigram_entropy") && j["unigram_entropy"].is_number()) {
      c.unigram_entropy = j["unigram_entropy"].get<double>();
    }
    if (j.contains("val_loss") && j["val_loss"].is_number()) c.val.push_back({step, j["val_loss"].get<double>()});
  }
  if (c.train.empty()) return make_error(metrics_path, ": no metrics lines");
  return c;
}

namespace {

// A "nice" tick step (1, 2 or 5 x 10^k) giving about `target` ticks over the span.
double tick_step(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::string loss_curve_svg(const LossCurves& c, const std::string& title, const std::vector<ReferenceLine>& refs) {
  return loss_curves_svg({{c, ""}}, title, refs);
}

std::string loss_curves_svg(const std::vector<LabeledCurves>& runs, const std::string& title,
                            const std::vector<ReferenceLine>& refs) {
  const double W = 720, H = 420, left = 60, right = 20, top = 40, bottom = 50;
  double x0 = 0, x1 = 1, y0 = 1e300, y1 = -1e300;
  for (const LabeledCurves& run : runs) {
    for (const auto* s : {&run.curves.train, &run.curves.val}) {
      for (const CurvePoint& p : *s) {
        x1 = std::max(x1, p.x);
        y0 = std::min(y0, p.y);
        y1 = std::max(y1, p.y);
      }
    }
  }
  for (const ReferenceLine& r : refs) {
    y0 = std::min(y0, r.y);
    y1 = std::max(y1, r.y);
  }
  if (!(y1 > y0)) y1 = y0 + 1;
  const double ys = tick_step(y1 - y0, 6);
  y0 = std::floor(y0 / ys) * ys;
  y1 = std::ceil(y1 / ys) * ys;
  const double xs = tick_step(x1 - x0, 8);
  x1 = std::ceil(x1 / xs) * xs;
  auto X = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto Y = [&](double y) { return top + (y1 - y) / (y1 - y0) * (H - top - bottom); };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << xml_text(title)
    << "</text>\n";
  // Ticks by index, not by `y += ys`: at 1e20 a step of 5000 is below the spacing of doubles, and the
  // sum would never move (a metrics file with such losses hung herd plot). At most 50 ticks per axis.
  for (int i = 0; i <= 50 && y0 + i * ys <= y1 + ys / 2; ++i) {
    const double y = y0 + i * ys;
    o << "<line x1=\"" << left << "\" x2=\"" << W - right << "\" y1=\"" << Y(y) << "\" y2=\"" << Y(y)
      << "\" stroke=\"#e5e5e5\"/><text x=\"" << left - 6 << "\" y=\"" << Y(y) + 4 << "\" text-anchor=\"end\">" << num(y)
      << "</text>\n";
  }
  for (int i = 0; i <= 50 && x0 + i * xs <= x1 + xs / 2; ++i) {
    const double x = x0 + i * xs;
    o << "<line x1=\"" << X(x) << "\" x2=\"" << X(x) << "\" y1=\"" << top << "\" y2=\"" << H - bottom
      << "\" stroke=\"#f0f0f0\"/><text x=\"" << X(x) << "\" y=\"" << H - bottom + 16 << "\" text-anchor=\"middle\">"
      << num(x) << "</text>\n";
  }
  o << "<text x=\"" << (left + W - right) / 2 << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\">step</text>\n";
  o << "<text transform=\"translate(16," << (top + H - bottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">loss (nats/token)</text>\n";
  for (const ReferenceLine& r : refs) {
    o << "<line x1=\"" << left << "\" x2=\"" << W - right << "\" y1=\"" << Y(r.y) << "\" y2=\"" << Y(r.y)
      << "\" stroke=\"#888\" stroke-dasharray=\"6,4\"/><text x=\"" << W - right - 4 << "\" y=\"" << Y(r.y) - 5
      << "\" text-anchor=\"end\" fill=\"#555\">" << xml_text(r.label) << "</text>\n";
  }
  auto polyline = [&](const std::vector<CurvePoint>& s, const char* color, double width) {
    o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"" << width << "\" points=\"";
    for (const CurvePoint& p : s) o << X(p.x) << "," << Y(p.y) << " ";
    o << "\"/>\n";
  };
  // (training, held-out) colours per run: blue/red for the first, as a single run has always been.
  const char* colors[][2] = {{"#4a7fd4", "#d4544a"}, {"#2a9d5c", "#e0a030"}, {"#8a5cc4", "#5a5a5a"}};
  std::vector<std::pair<std::string, const char*>> legend;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const LossCurves& c = runs[r].curves;
    const char* tc = colors[r % 3][0];
    const char* vc = colors[r % 3][1];
    const std::string prefix = runs[r].label.empty() ? "" : runs[r].label + " ";
    polyline(c.train, tc, 1.2);
    legend.push_back({prefix + (prefix.empty() ? "training loss" : "training"), tc});
    if (!c.val.empty()) {
      polyline(c.val, vc, 2);
      for (const CurvePoint& p : c.val)
        o << "<circle cx=\"" << X(p.x) << "\" cy=\"" << Y(p.y) << "\" r=\"3\" fill=\"" << vc << "\"/>\n";
    }
    // A single run's legend names both curves even without held-out points, as it always has.
    if (!c.val.empty() || runs.size() == 1)
      legend.push_back({prefix + (prefix.empty() ? "held-out loss" : "held-out"), vc});
  }
  const double lw = 170, lh = 8 + 18 * static_cast<double>(legend.size());
  o << "<rect x=\"" << W - right - lw << "\" y=\"" << top + 8 << "\" width=\"" << lw - 10 << "\" height=\"" << lh
    << "\" fill=\"white\" stroke=\"#ccc\"/>\n";
  for (std::size_t i = 0; i < legend.size(); ++i) {
    const double y = top + 22 + 18 * static_cast<double>(i);
    o << "<line x1=\"" << W - right - 160 << "\" x2=\"" << W - right - 135 << "\" y1=\"" << y << "\" y2=\"" << y
      << "\" stroke=\"" << legend[i].second << "\" stroke-width=\"2\"/><text x=\"" << W - right - 128 << "\" y=\""
      << y + 4 << "\">" << xml_text(legend[i].first) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace herd::cli
