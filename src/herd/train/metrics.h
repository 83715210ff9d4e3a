// Training metrics: one JSON object per line (--metrics-file) and the human progress line.
//
// Each step writes at least {"step", "loss", "lr", "tokens", "tokens_per_s"} plus the gradient norm,
// the measured MFU and the elapsed time; evaluation steps add "val_loss". Lines are flushed as they
// are written, so a crashed run keeps every completed step and `herd plot` can read a live file.
// MFU = tokens/s x model FLOPs per token (model/flops.h, 6N + causal attention) / peak, with the peak
// configurable (train.peak_gflops_per_core x threads; ENVIRONMENT.md measured ~117 GFLOP/s fp32 per core).
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

#include "herd/core/error.h"
#include "herd/core/json.h"

namespace herd::train {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Appends when `append` (a resumed run continues its file), truncates otherwise.
  static Result<MetricsWriter> open(const std::string& path, bool append);
  bool enabled() const { return out_.is_open(); }
  void write(const Json& record);

 private:
  std::ofstream out_;
};

// "step   50/300 | loss 4.1234 | lr 2.95e-03 | 12.3k tok/s | MFU 45.1% | ETA 1m20s"
std::string progress_line(std::int64_t step, std::int64_t steps, double loss, double lr, double tokens_per_s,
                          double mfu, double eta_s);

// "1h02m", "3m20s", "42s".
std::string format_eta(double seconds);

}  // namespace herd::train
