// `herd plot` writes an SVG of a metrics file: every step's loss as a polyline, the evaluations, and the
// unigram entropy as a reference line; steps the NaN guard skipped (loss null) are left out; a malformed
// metrics line is a one-line error naming the file, the line and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_runner.h"
#include "herd/cli/loss_plot.h"

namespace herd::cli {
namespace {

TEST(PlotCli, WritesAnSvgOfTheMetrics) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string metrics = (dir / "herd_plot_test.jsonl").string();
  const std::string svg = (dir / "herd_plot_test.svg").string();
  {
    std::ofstream m(metrics);
    for (int s = 1; s <= 20; ++s) {
      m << "{\"step\": " << s << ", \"loss\": " << 9.0 - 0.2 * s << ", \"lr\": 0.001, \"tokens\": " << 100 * s
        << ", \"tokens_per_s\": 10, \"time\": 1.7e9, \"step_s\": 0.1" << (s == 3 ? ", \"redone\": true" : "")
        << (s % 5 == 0 ? ", \"val_loss\": 5, \"unigram_entropy\": 6.5" : "") << "}\n";
    }
    // A supervised job's file ends with the supervisor's summary (train/job/ett.h), which is not a step.
    m << "{\"ett\": 0.9, \"restarts\": 1, \"lost_s\": 1.5, \"restart_s\": 2.0}\n";
  }
  herd::testing::CliResult r = herd::testing::run_herd("plot " + metrics + " --svg " + svg);
  EXPECT_EQ(r.status, 0) << r.err;
  Result<LossCurves> c = read_loss_curves(metrics);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->train.size(), 20u);
  EXPECT_EQ(c->val.size(), 4u);
  EXPECT_DOUBLE_EQ(c->unigram_entropy, 6.5);
  const std::string text = herd::testing::slurp(svg);
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("unigram entropy 6.50"), std::string::npos);
  EXPECT_NE(text.find("<polyline"), std::string::npos);

  // A step the NaN guard skipped (its non-finite numbers written as null) is left out of the curve.
  std::ofstream(metrics) << "{\"step\": 1, \"loss\": 3.5}\n{\"step\": 2, \"loss\": null, \"grad_norm\": null, "
                            "\"skipped\": true, \"nonfinite\": \"attention\"}\n{\"step\": 3, \"loss\": 3.25}\n";
  r = herd::testing::run_herd("plot " + metrics + " --svg " + svg);
  EXPECT_EQ(r.status, 0) << r.err;
  c = read_loss_curves(metrics);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->train.size(), 2u);

  std::ofstream(metrics) << "{\"step\": 1}\n";
  r = herd::testing::run_herd("plot " + metrics + " --svg " + svg);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(metrics + ":1.loss: missing"), std::string::npos) << r.err;
  std::filesystem::remove(metrics);
  std::filesystem::remove(svg);
}

// --compare puts a second run on the same axes, each with its own colours and legend names.
TEST(PlotCli, ComparePlotsTwoRunsWithTheirLabels) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string a = (dir / "herd_plot_a.jsonl").string(), b = (dir / "herd_plot_b.jsonl").string();
  const std::string svg = (dir / "herd_plot_ab.svg").string();
  for (const auto& [path, shift] : {std::pair{a, 0.0}, {b, 0.05}}) {
    std::ofstream m(path);
    for (int s = 1; s <= 10; ++s) {
      m << "{\"step\": " << s << ", \"loss\": " << 9.0 - 0.2 * s + shift << (s == 10 ? ", \"val_loss\": 7" : "")
        << "}\n";
    }
  }
  herd::testing::CliResult r =
      herd::testing::run_herd("plot " + a + " --compare " + b + " --labels fp32,bf16 --svg " + svg);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = herd::testing::slurp(svg);
  std::size_t lines = 0;
  for (std::size_t at = text.find("<polyline"); at != std::string::npos; at = text.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 4u);  // two training and two held-out curves
  for (const char* label : {"fp32 training", "bf16 training", "fp32 held-out", "bf16 held-out"}) {
    EXPECT_NE(text.find(label), std::string::npos) << label;
  }
  r = herd::testing::run_herd("plot " + a + " --compare " + b + " --labels fp32 --svg " + svg);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--labels 'fp32': expected two names"), std::string::npos) << r.err;
  r = herd::testing::run_herd("plot " + a + " --labels x,y --svg " + svg);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--labels: only with --compare"), std::string::npos) << r.err;
  for (const std::string& f : {a, b, svg}) std::filesystem::remove(f);
}

}  // namespace
}  // namespace herd::cli
