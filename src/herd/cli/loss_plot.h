// Loss curves as standalone SVG: the training loss of every step and the held-out loss of the
// evaluation steps, read from a metrics file (JSON lines, as `herd train --train.metrics_file` writes).
// Optional horizontal reference lines (e.g. the corpus's unigram entropy) put the curve in context.
// Used by `herd plot` (cli/plot.cpp) only, so it lives beside it rather than in train/.
#pragma once

#include <string>
#include <vector>

#include "herd/core/error.h"

namespace herd::cli {

struct CurvePoint {
  double x = 0;
  double y = 0;
};

struct LossCurves {
  std::vector<CurvePoint> train;  // (step, loss)
  std::vector<CurvePoint> val;    // (step, val_loss)
  double unigram_entropy = 0;     // from the file's "unigram_entropy" field; 0 when absent
};

// Lines without "step" and "loss" are errors naming the file and the line number.
Result<LossCurves> read_loss_curves(const std::string& metrics_path);

struct ReferenceLine {
  double y = 0;
  std::string label;
};

std::string loss_curve_svg(const LossCurves& curves, const std::string& title,
                           const std::vector<ReferenceLine>& references = {});

// Several runs on the same axes (`herd plot A --compare B`): each run's training and held-out curves in
// its own pair of colours, labelled "<label> training" and "<label> held-out" in the legend.
struct LabeledCurves {
  LossCurves curves;
  std::string label;
};
std::string loss_curves_svg(const std::vector<LabeledCurves>& runs, const std::string& title,
                            const std::vector<ReferenceLine>& references = {});

}  // namespace herd::cli
