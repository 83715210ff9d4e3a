// Whole-run parity: N steps of AdamW with global-norm clipping on DistributedLlama reproduce the
// single-rank run (nn::LlamaModel + the same kernels/optim.h update train::AdamW applies): the loss
// curve and the final weights within 1e-10 relative in double (every element, relative to the
// weight's largest entry) and 1e-5 in fp32 (relative L2 norm of the difference, over all weights and,
// in the default run, of each weight tensor; see FullMatrix for the one tensor that needs 2e-5).
//
// The default run covers a few layouts for 6 steps; HERD_PARITY_FULL=1 runs the matrix,
// TP in {1,2,4} x DP in {1,2,4} (at most 8 ranks) x SP on/off, 20 steps each, in double and fp32
// (a few seconds: ctest sets it, tests/CMakeLists.txt):
//   HERD_PARITY_FULL=1 ./build/tests/herd_parallel_tests --gtest_filter='DistributedTraining.*'
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "parallel/model_test_util.h"

namespace herd::parallel {
namespace {

using namespace testing;  // NOLINT

constexpr double kLr = 1e-2;
constexpr double kMaxNorm = 0.5;  // below the first steps' norms, so clipping is exercised
constexpr std::int64_t kSeqs = 4, kT = 8;

kernels::AdamWConfig adamw() {
  kernels::AdamWConfig c;
  c.weight_decay = 0.1;
  return c;
}

template <typename T>
struct RunResult {
  std::vector<double> losses;  // mean loss per step
  std::vector<T> weights;
};

template <typename T>
RunResult<T> single_rank(const model::LlamaConfig& cfg, int steps, std::int64_t micro = 2) {
  nn::LlamaModel<T> m(cfg, model::Recompute::kNone, micro, kT);
  m.init_weights(5);
  const std::int64_t n = m.param_count();
  std::vector<T> mom(static_cast<std::size_t>(n), T(0)), var(static_cast<std::size_t>(n), T(0));
  RunResult<T> run;
  for (int s = 0; s < steps; ++s) {
    const Batch b = make_batch(kSeqs, kT, cfg.vocab, 100 + static_cast<std::uint32_t>(s));
    const T scale = T(1) / static_cast<T>(b.real_tokens());
    m.zero_grads();
    double loss = 0;
    for (std::int64_t mb = 0; mb < kSeqs / micro; ++mb) {
      loss += m.forward_backward(b.rows(micro * mb, micro), scale).loss_sum;
    }
    run.losses.push_back(loss / static_cast<double>(b.real_tokens()));
    const double c = kernels::clip_coefficient(std::sqrt(kernels::sum_squares<T>(m.grads(), n)), kMaxNorm);
    kernels::AdamWConfig cfg_opt = adamw();
    cfg_opt.lr = kLr;
    kernels::adamw_step<T>(m.params(), m.grads(), mom.data(), var.data(), n, cfg_opt, s + 1, static_cast<T>(c));
  }
  run.weights.assign(m.params(), m.params() + n);
  return run;
}

template <typename T>
void check_training(std::int64_t tp, std::int64_t dp, bool sp, bool reshard, int steps, double tol,
                    double weight_tol = 0) {
  if (weight_tol == 0) weight_tol = tol;
  SCOPED_TRACE("tp" + std::to_string(tp) + " dp" + std::to_string(dp) + (sp ? " sp" : " nosp") +
               (reshard ? " reshard" : ""));
  const model::LlamaConfig cfg = small_gqa_model();
  const RunResult<T> ref = single_rank<T>(cfg, steps);
  nn::LlamaModel<T> layout(cfg, model::Recompute::kFull, 1, 1);  // for the named-parameter table only
  run_layout(tp, dp, sp, reshard, [&](const ParallelContext& ctx) -> Status {
    const std::int64_t per_rank = kSeqs / dp;
    HERD_ASSIGN_OR_RETURN(auto model_ptr,
                          rank_model<T>(ctx, cfg, model::Recompute::kSelective, 1, kT, static_cast<int>(per_rank)));
    RankModel<T>& model = *model_ptr;
    model.init_weights(5);
    for (int s = 0; s < steps; ++s) {
      const Batch b = make_batch(kSeqs, kT, cfg.vocab, 100 + static_cast<std::uint32_t>(s));
      // Each DP rank counts its own rows; the global count comes from the helper the trainer uses.
      std::int64_t mine = 0;
      for (std::int64_t m = 0; m < per_rank; ++m) {
        const nn::MicroBatch mb = b.rows(ctx.dp_rank() * per_rank + m, 1);
        mine += std::count_if(mb.targets, mb.targets + mb.rows(), [](std::int32_t x) { return x >= 0; });
      }
      std::int64_t tokens = mine;  // different rows on each DP rank (cp = 1)
      HERD_RETURN_IF_ERROR(ctx.dp->all_reduce<std::int64_t>(&tokens, 1, comm::ReduceOp::kSum));
      COMM_EXPECT(tokens == b.real_tokens(), tokens, " vs ", b.real_tokens());
      const T scale = T(1) / static_cast<T>(tokens);
      model.zero_grads();
      std::vector<nn::MicroBatch> mbs;
      for (std::int64_t m = 0; m < per_rank; ++m) mbs.push_back(b.rows(ctx.dp_rank() * per_rank + m, 1));
      HERD_ASSIGN_OR_RETURN(auto l, model.forward_backward_step(mbs, scale));
      double loss = l.loss_sum;
      HERD_RETURN_IF_ERROR(ctx.dp->all_reduce<double>(&loss, 1, comm::ReduceOp::kSum));
      loss /= static_cast<double>(b.real_tokens());
      const double want = ref.losses[static_cast<std::size_t>(s)];
      COMM_EXPECT(std::abs(loss - want) <= tol * std::abs(want), "step ", s, " loss ", loss, " vs ", want);
      HERD_ASSIGN_OR_RETURN(const double norm, model.step(adamw(), kLr, kMaxNorm));
      COMM_EXPECT(std::isfinite(norm));
    }
    HERD_ASSIGN_OR_RETURN(auto w, model.gather_full(false));
    // The whole model's weights, as one vector, always within tol; each tensor within weight_tol.
    const nn::NamedParam all{"all weights", 0, static_cast<std::int64_t>(w.size()), 1};
    const double whole = sizeof(T) == 8 ? rel_diff(w, ref.weights.data(), all) : rel_l2(w, ref.weights.data(), all);
    COMM_EXPECT(whole <= tol, "final weights differ by ", whole, " relative");
    for (const nn::NamedParam& p : layout.named_params()) {
      // double: elementwise max |diff| / max |w|; fp32: relative L2 per weight (see rel_l2).
      const double r = sizeof(T) == 8 ? rel_diff(w, ref.weights.data(), p) : rel_l2(w, ref.weights.data(), p);
      COMM_EXPECT(r <= weight_tol, "final ", p.name, " differs by ", r, " relative");
    }
    return Status::Ok();
  });
}

// The fp32 floor: the single-rank run against itself with a different micro-batch split (the same
// sums, associated differently). Printed for docs/tp.md; bounded loosely so the test can fail.
TEST(DistributedTraining, Fp32NoiseFloorOfTheSingleRankRun) {
  const model::LlamaConfig cfg = small_gqa_model();
  nn::LlamaModel<float> layout(cfg, model::Recompute::kFull, 1, 1);
  const RunResult<float> a = single_rank<float>(cfg, 20, 2), b = single_rank<float>(cfg, 20, 1);
  double worst = 0;
  for (const nn::NamedParam& p : layout.named_params()) worst = std::max(worst, rel_l2(a.weights, b.weights.data(), p));
  std::printf("fp32 single-rank, 2x2 vs 4x1 micro-batches, 20 steps: worst weight rel L2 %.3g\n", worst);
  EXPECT_LT(worst, 1e-3);
}

bool full_matrix() {
  const char* e = std::getenv("HERD_PARITY_FULL");
  return e != nullptr && std::string(e) == "1";
}

TEST(DistributedTraining, DoubleMatchesSingleRank) {
  check_training<double>(2, 2, true, true, 6, 1e-10);
  check_training<double>(4, 2, false, false, 6, 1e-10);
  check_training<double>(1, 4, true, false, 6, 1e-10);
}

TEST(DistributedTraining, Fp32MatchesSingleRank) { check_training<float>(2, 2, true, false, 6, 1e-5); }

TEST(DistributedTraining, FullMatrix) {
  if (!full_matrix()) GTEST_SKIP() << "set HERD_PARITY_FULL=1 for TP {1,2,4} x DP {1,2,4} x SP on/off, 20 steps";
  for (std::int64_t tp : {1, 2, 4}) {
    for (std::int64_t dp : {1, 2, 4}) {
      if (tp * dp > 8) continue;
      for (bool sp : {true, false}) {
        check_training<double>(tp, dp, sp, dp == 2, 20, 1e-10);
        // fp32 after 20 steps at lr 1e-2: the loss curve holds 1e-5, but with tp > 1 one weight
        // (layers.1.w_gate) reaches 1.0-1.5e-5 relative L2 (rounding of the split GEMMs amplified
        // by Adam; double holds 1e-10 on the same runs), against 2.8e-6 for the single-rank run under
        // another micro-batch split (Fp32NoiseFloorOfTheSingleRankRun). See docs/tp.md.
        check_training<float>(tp, dp, sp, false, 20, 1e-5, 2e-5);
      }
    }
  }
}

}  // namespace
}  // namespace herd::parallel
