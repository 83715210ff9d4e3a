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
    // A supervised job's file ends with the supervisor's summary (train/ett.h), which is not a step.
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

}  // namespace
}  // namespace herd::cli
