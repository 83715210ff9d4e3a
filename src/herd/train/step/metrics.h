// Training metrics: one JSON object per line (--metrics-file) and the human progress line.
//
// Each step writes at least {"step", "loss", "lr", "tokens", "tokens_per_s"} plus the gradient norm,
// the measured MFU, the elapsed time, the step's own time "step_s" and the wall clock "time" (unix
// seconds, which the supervisor's time accounting reads); evaluation steps add "val_loss".
// A resumed run rewrites the file first (atomically: a temporary file renamed over it) without the
// lines of steps after its checkpoint, so redone steps are not duplicated; they carry "redone": true.
// A supervised job ends with one summary record (train/job/supervisor.h: {"ett", "restarts", ...}, no
// "step"), which the rewrite drops: a new summary follows at the end. Lines are flushed as they
// are written, so a crashed run keeps every completed step and `herd plot` can read a live file. A
// record that cannot be written (a full disk) ends the job at the next step boundary with one error
// naming the file (the trainer's control all-reduce carries it to every rank).
// MFU = tokens/s x model FLOPs per token (model/flops.h, 6N + causal attention) / peak, with the peak
// train.peak_gflops_per_core x threads when given, else the calibrated per-core GEMM rate of the run's
// precision x threads (train/plan/projection.h, peak_flops_per_core).
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
  // resumed_from < 0: a new run, the file is truncated. Else the run resumed from that step: the file
  // keeps its lines of steps up to it and is appended to; redone_until() is the last step dropped.
  static Result<MetricsWriter> open(const std::string& path, std::int64_t resumed_from);
  bool enabled() const { return out_.is_open(); }
  // Appends one record and flushes it. A failed write (a full disk) is an error naming the file; the
  // writer then writes nothing more.
  Status write(const Json& record);
  std::int64_t redone_until() const { return redone_until_; }

 private:
  std::ofstream out_;
  std::string path_;
  std::int64_t redone_until_ = 0;
};

// Seconds since the unix epoch (the "time" of a record).
double unix_time();

// "step   50/300 | loss 4.1234 | lr 2.95e-03 | 12.3k tok/s | MFU 45.1% | ETA 1m20s"
std::string progress_line(std::int64_t step, std::int64_t steps, double loss, double lr, double tokens_per_s,
                          double mfu, double eta_s);

// "1h02m", "3m20s", "42s".
std::string format_eta(double seconds);

}  // namespace herd::train
