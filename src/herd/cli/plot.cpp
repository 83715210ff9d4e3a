// herd plot METRICS.jsonl --svg OUT.svg: the loss curve of a training run (training loss per step,
// held-out loss at the evaluation steps, and the held-out tokens' unigram entropy as a reference line).
#include <fstream>
#include <iostream>

#include "herd/cli/app.h"
#include "herd/cli/loss_plot.h"
#include "herd/core/format.h"

namespace herd::cli {

namespace {

struct PlotOptions {
  std::string metrics;
  std::string svg;
  std::string title = "herd train: loss";
};

int run_plot(const PlotOptions& o) {
  Result<LossCurves> c = read_loss_curves(o.metrics);
  if (!c.ok()) return report_error("plot", c.error());
  std::vector<ReferenceLine> refs;
  if (c->unigram_entropy > 0) {
    refs.push_back({c->unigram_entropy, "unigram entropy " + format_fixed(c->unigram_entropy, 2)});
  }
  const std::string svg = loss_curve_svg(*c, o.title, refs);
  std::ofstream out(o.svg);
  if (!out || !(out << svg)) return report_error("plot", make_error("--svg '", o.svg, "': cannot write"));
  std::cerr << "wrote " << o.svg << " (" << c->train.size() << " steps, " << c->val.size() << " evaluations)\n";
  return 0;
}

}  // namespace

Subcommand add_plot_command(CLI::App& root) {
  auto opts = std::make_shared<PlotOptions>();
  CLI::App* app = root.add_subcommand("plot", "Plot the loss curve of a metrics file (JSON lines) as SVG");
  app->add_option("metrics", opts->metrics, "Metrics file written by herd train (--train.metrics_file)")->required();
  app->add_option("--svg", opts->svg, "Output SVG file")->required();
  app->add_option("--title", opts->title, "Plot title")->capture_default_str();
  return {app, [opts] { return run_plot(*opts); }};
}

}  // namespace herd::cli
