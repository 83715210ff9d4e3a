// herd calibrate, its kernel and communicator stage: this machine's GEMM (fp32 and bf16, one thread and
// all cores), attention, elementwise and per-op rates and the local communicator's link, each measurement
// taken several times with disturbed or implausible takes redone (measure/steady.h). cli/calibrate.cpp
// runs these, then the training steps that calibrate the runtime around them, and writes the cluster.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "herd/measure/comm_fit.h"
#include "herd/measure/steady.h"
#include "herd/model/config.h"
#include "herd/topology/cluster.h"
#include "herd/train/plan/calibration_store.h"

namespace herd::train::calibration {

struct CalibrateOptions {
  std::string model = "tiny";
  std::int64_t micro_batch = 8;
  std::int64_t seq_len = 256;
  std::string out;              // empty: this machine's stored calibration
  std::string calibration_dir;  // the store (train/plan/calibration_store.h); empty: beside the executable
  std::string previous;         // compare with this calibration; empty: the stored one; "none": no comparison
  bool if_missing = false;      // a calibration by this build at the output already: say so, measure nothing
  int repeats = 7;
  int takes = 2;
  double background_jobs = -1;  // -1: measured from /proc
};

// How far a rate may move from this machine's last calibration of the same shapes before the take is
// redone: this kind of shared virtual machine moves up to 1.8x between hours (docs/projection.md), so
// a change that survives the retries is kept, and said.
constexpr double kFarFromLast = 1.5;

// A two-thread (all-core) GEMM scaling below this is not a property of the cores but of something that
// ran beside the take (the 0.17 against 1.0 clean): the take is redone.
constexpr double kLowestScaling = 0.5;

// "" when `now` is within kFarFromLast of `last` (or there is no last), else why the take is redone.
std::string far_from_last(const char* what, double now, double last, const std::string& taken_at);

// One calibration in progress: the options, the model, the last calibration to compare rates with, and
// every measurement taken so far (each `takes` takes, the best kept, disturbed ones redone:
// measure/steady.h), with the table printed at the end.
struct Session {
  Session(const CalibrateOptions& options, const model::LlamaConfig& model) : o(options), m(model) {}
  const CalibrateOptions& o;
  const model::LlamaConfig& m;
  std::int64_t rows = 0;  // tokens of one micro-batch: the GEMMs' m
  int cores = 1;
  std::optional<StoredCalibration> last;
  measure::LoadProbe probe;
  std::vector<measure::SteadyResult> steady;
  std::vector<std::vector<std::string>> table_rows;  // what, shape, median, rate: the table `herd calibrate` prints

  std::string last_taken_at() const { return last ? last->taken_at : ""; }
  double last_number(const char* key) const {
    return last && last->record.contains(key) && last->record[key].is_number() ? last->record[key].get<double>() : 0.0;
  }
  // herd's own training steps are compared only with a calibration of this build: another build's steps
  // time other kernels (the libraries' GEMM rates compare across builds).
  double last_step(const char* key) const { return last && last->measured_by_this_build() ? last_number(key) : 0.0; }

  const measure::SteadyResult& measure(const std::string& what, bool wall_clock, const measure::TakeFn& take,
                                       const measure::PlausibleFn& plausible = nullptr) {
    measure::SteadyOptions so;
    so.takes = o.takes;
    so.max_takes = o.takes + 2;
    so.load_sensitive = wall_clock;
    steady.push_back(measure::measure_steady(what, take, plausible, so, probe));
    return steady.back();
  }
};

// The GEMM rates at the model's shapes: one thread and all cores in fp32, one thread through gemm_bf16
// (`train.precision = bf16`: the bf16 peak of this machine's path).
struct GemmRates {
  double one_thread = 0, all_cores = 0, bf16_one_thread = 0;
  bool all_cores_disturbed = false;
};
GemmRates measure_gemms(Session& s);

// herd's flash attention at the model's shape (one sequence per micro-batch row, causal), forward and
// backward, as fractions of the GEMM rate: fp32, and the bf16 block's kernel (nn/block.cpp,
// nn/block_backward.cpp: bf16 q, k, v and out, its fp32 output rounded for saving and its fp32 gradients
// rounded for the GEMMs after it) against the bf16 GEMM rate.
struct AttentionRates {
  double fwd = 0, bwd = 0, bf16_fwd = 0, bf16_bwd = 0;
};
AttentionRates measure_attention(Session& s, const GemmRates& g);

// The streaming bandwidth of herd's elementwise kernels: RMSNorm forward (read x, write y) and backward
// (read dy, x; write dx), bytes per second.
double measure_stream(Session& s);

// herd's AdamW (kernels::adamw_step) over the model's parameters on one thread, bytes per second of
// its traffic (fp32 p, g, m, v read and p, m, v written: 28 bytes a parameter). Unlike the
// elementwise kernels' rows, its state does not fit in a cache: it streams from memory.
double measure_optimizer(Session& s);

// Per-op overhead in microseconds: a 16^3 GEMM is all call and threading cost.
double measure_op_overhead(Session& s, double gemm_one_thread);

// The communicator: the 2-rank collectives give the planner's link. Bandwidth from the largest size
// (the MB-sized activations and FSDP units of training; smaller ones run from cache and copy faster),
// latency per step from the smallest once its copy time is taken off. The 4-rank runs are shown against
// the fit, not fitted; send/recv is one copy, not a collective: shown against the same link.
struct CommCalibration {
  std::vector<measure::CommSample> samples;  // 2 ranks, then 4
  measure::LinkFit fit;
};
Result<CommCalibration> measure_comm(const Session& s);

// The local-cpu cluster from the kernel and communicator rates alone, before the runtime around the
// kernels is measured (fit_runtime derates it).
// optimizer_bw: measure_optimizer's rate, set as the optimizer's share of the streaming rate.
topology::Cluster kernel_cluster(const topology::Cluster& preset, int cores, const GemmRates& g,
                                 const AttentionRates& at, double stream, double optimizer_bw, double overhead_us,
                                 double gemm_scaling, const measure::LinkFit& fit);

}  // namespace herd::train::calibration
