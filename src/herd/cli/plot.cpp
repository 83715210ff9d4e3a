// herd plot METRICS.jsonl --svg OUT.svg: the loss curve of a training run (training loss per step,
// held-out loss at the evaluation steps, and the held-out tokens' unigram entropy as a reference line).
// --compare OTHER.jsonl [--labels A,B] puts a second run on the same axes (e.g. fp32 and bf16 of the
// same run, docs/precision.md).
#include <fstream>
#include <iostream>

#include "herd/cli/app.h"
#include "herd/cli/loss_plot.h"
#include "herd/core/file_write.h"
#include "herd/core/format.h"

namespace herd::cli {

namespace {

struct PlotOptions {
  std::string metrics;
  std::string svg;
  std::string title = "herd train: loss";
  std::string compare;  // a second metrics file on the same axes
  std::string labels;   // "A,B": the two runs' legend names
};

int run_plot(const PlotOptions& o) {
  Result<LossCurves> c = read_loss_curves(o.metrics);
  if (!c.ok()) return report_error("plot", c.error());
  std::vector<ReferenceLine> refs;
  if (c->unigram_entropy > 0) {
    refs.push_back({c->unigram_entropy, "unigram entropy " + format_fixed(c->unigram_entropy, 2)});
  }
  std::string svg;
  if (o.compare.empty()) {
    if (!o.labels.empty()) return report_error("plot", make_error("--labels: only with --compare (one label per run)"));
    svg = loss_curve_svg(*c, o.title, refs);
  } else {
    Result<LossCurves> other = read_loss_curves(o.compare);
    if (!other.ok()) return report_error("plot", other.error().with_context("--compare"));
    std::string a = o.metrics, b = o.compare;
    if (!o.labels.empty()) {
      const auto comma = o.labels.find(',');
      if (comma == std::string::npos || o.labels.find(',', comma + 1) != std::string::npos) {
        return report_error("plot", make_error("--labels '", o.labels, "': expected two names, A,B (e.g. fp32,bf16)"));
      }
      a = o.labels.substr(0, comma);
      b = o.labels.substr(comma + 1);
    }
    svg = loss_curves_svg({{*c, a}, {*other, b}}, o.title, refs);
  }
  if (Status s = write_file(o.svg, svg); !s.ok()) {
    return report_error("plot", make_error("--svg: ", s.error().message(), "; give a writable file"));
  }
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
  app->add_option("--compare", opts->compare, "A second metrics file, plotted on the same axes");
  app->add_option("--labels", opts->labels, "With --compare: the two runs' names in the legend, A,B");
  return {app, [opts] { return run_plot(*opts); }};
}

}  // namespace herd::cli
