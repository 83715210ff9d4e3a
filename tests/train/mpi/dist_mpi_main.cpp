// One rank of a TP x CP x PP x DP parity run under mpirun: every rank trains its parallel::RankModel with the MPI
// backend (deterministic reductions) through the same run_rank as `herd train`, and rank 0 compares the
// loss curve and the gathered weights with the single-rank reference (1e-10 relative, double). With
// --precision bf16 the ranks train in float with bf16 compute (FSDP's bf16 all-gathers in place over
// MPI, fp32 reduce-scatters) and rank 0 compares with the one-rank bf16 run of the same trainer within
// bf16_parity_test.cpp's bounds (1e-3 loss, 1e-2 weights).
// Used by tests/train/mpi/CMakeLists.txt (one machine) and netns_two_hosts.sh (two network namespaces).
//   dist_mpi_main --tp T [--cp C] [--pp P --v V --m M --n N] --dp D [--steps S]
// (pipelines train the 6-layer parity model, the others the 2-layer one)     exit 0 and "PARITY OK" on rank 0 when it
// matches
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "herd/comm/world.h"
#include "herd/train/job/job.h"
#include "train/dist_harness.h"

int main(int argc, char** argv) {
  using namespace herd;
  using namespace herd::train;
  TrainConfig cfg = testing::parity_config();
  std::string precision = "fp64";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::int64_t v = std::atoll(argv[i + 1]);
    if (k == "--precision") precision = argv[i + 1];
    if (k == "--tp") cfg.parallel.tp = v;
    if (k == "--cp") cfg.parallel.cp = v;
    if (k == "--pp") cfg.parallel.pp = v;
    if (k == "--v") cfg.parallel.v = v;
    if (k == "--m") cfg.train.global_batch = 4 * v;  // M global micro-batches of 4 sequences
    if (k == "--n") cfg.parallel.n = static_cast<int>(v);
    if (k == "--dp") cfg.parallel.dp = v;
    if (k == "--steps") cfg.train.steps = v;
  }
  cfg.parallel.microbatch = 4 / cfg.parallel.dp;
  const model::LlamaConfig model_cfg = testing::parity_model(cfg.parallel.pp > 1 ? 6 : 2);
  comm::CommOptions opts;
  opts.timeout_s = 120;
  Result<std::unique_ptr<comm::Communicator>> world = comm::make_mpi_world(opts);
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.error().message().c_str());
    return 2;
  }
  const auto docs = testing::parity_docs(80, 7);
  const Result<JobLayout> layout = check_layout(cfg, model_cfg, (*world)->size());
  if (!layout.ok()) {
    std::fprintf(stderr, "%s\n", layout.error().message().c_str());
    return 2;
  }
  if (precision == "bf16") {
    cfg.train.precision = Precision::kBF16;
    JobResult<float> got;
    Status s = run_rank<float>(**world, cfg, *layout, model_cfg, {docs, nullptr}, &got);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", (*world)->rank(), s.error().message().c_str());
      return 1;
    }
    if ((*world)->rank() != 0) return 0;
    TrainConfig one = cfg;
    one.parallel.tp = one.parallel.cp = one.parallel.pp = one.parallel.dp = 1;
    one.parallel.microbatch = 4;
    one.parallel.v = 1;
    one.parallel.n = 0;
    JobResult<float> ref;
    s = run_local_job<float>(one, model_cfg, {docs, nullptr}, &ref);
    if (!s.ok() || ref.history.size() != got.history.size() || ref.weights.size() != got.weights.size()) {
      std::fprintf(stderr, "rank 0: the one-rank bf16 run: %s\n",
                   s.ok() ? "sizes differ" : s.error().message().c_str());
      return 1;
    }
    double worst_loss = 0, worst_weight = 0;
    for (std::size_t i = 0; i < ref.history.size(); ++i) {
      worst_loss = std::max(worst_loss, std::fabs(got.history[i].loss - ref.history[i].loss) / ref.history[i].loss);
    }
    for (std::size_t i = 0; i < ref.weights.size(); ++i) {
      worst_weight = std::max(worst_weight, testing::rel_diff(got.weights[i].second, ref.weights[i].second));
    }
    const bool ok = worst_loss <= 1e-3 && worst_weight <= 1e-2;
    std::printf("%s: bf16, world %d, %zu steps, max rel loss diff %.3g, max rel weight diff %.3g (vs 1 rank bf16)\n",
                ok ? "PARITY OK" : "PARITY FAILED", (*world)->size(), ref.history.size(), worst_loss, worst_weight);
    return ok ? 0 : 1;
  }
  JobResult<double> out;
  Status s = run_rank<double>(**world, cfg, *layout, model_cfg, {docs, nullptr}, &out);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", (*world)->rank(), s.error().message().c_str());
    return 1;
  }
  if ((*world)->rank() != 0) return 0;
  const auto ref = testing::reference_run<double>(cfg, model_cfg, docs);
  double worst_loss = 0, worst_weight = 0;
  if (out.history.size() != ref.losses.size() || out.weights.size() != ref.weights.size()) {
    std::fprintf(stderr, "rank 0: %zu steps and %zu tensors, expected %zu and %zu\n", out.history.size(),
                 out.weights.size(), ref.losses.size(), ref.weights.size());
    return 1;
  }
  for (std::size_t i = 0; i < ref.losses.size(); ++i) {
    worst_loss = std::max(worst_loss, std::fabs(out.history[i].loss - ref.losses[i]) / ref.losses[i]);
  }
  for (std::size_t i = 0; i < ref.weights.size(); ++i) {
    worst_weight = std::max(worst_weight, testing::rel_diff(out.weights[i].second, ref.weights[i].second));
  }
  const bool ok = worst_loss <= 1e-10 && worst_weight <= 1e-10;
  std::printf(
      "%s: world %d (tp %lld x cp %lld x pp %lld x dp %lld), %zu steps, final loss %.6f, max rel loss diff %.3g, max "
      "rel weight "
      "diff "
      "%.3g\n",
      ok ? "PARITY OK" : "PARITY FAILED", (*world)->size(), static_cast<long long>(cfg.parallel.tp),
      static_cast<long long>(cfg.parallel.cp), static_cast<long long>(cfg.parallel.pp),
      static_cast<long long>(cfg.parallel.dp), ref.losses.size(), ref.losses.back(), worst_loss, worst_weight);
  return ok ? 0 : 1;
}
