// bf16 golden parity with PyTorch's bf16 autocast (tools/llama_golden_bf16.py,
// tests/train/golden/llama_tiny_bf16.bin): the tiny Llama 3 and packed batch of golden_test.cpp, run
// through herd's production path in `train.precision = bf16` (parallel::RankModel<float> at
// degree 1 with ctx.precision bf16: bf16 weight copies, gemm_bf16, bf16 saved activations, fp32 elsewhere).
//
// Tolerances (docs/precision.md derives them): both sides round the same fp32 weights to bf16 and feed
// bf16 values to every matmul, summing in fp32, but they round at different places (autocast rounds
// every linear's output, its scores-times-values input and every gradient of a bf16 op; herd keeps
// GEMM outputs, gradients and the residual in fp32 and rounds where it saves or feeds a GEMM). Each
// rounding moves a value by at most u = 2^-8 of itself; independent roundings add like a random walk
// over the ~10 rounding points a value passes per layer (2 layers, forward and back), and a gradient is
// a sum of such terms. So: logits within 4u of their largest entry, the loss within u/2, each gradient
// tensor within 8u of its largest entry. The file's calibration says how far PyTorch's bf16 run itself
// is from float64 (about 1-2u on the logits, 2-4u on the gradients), so these bounds sit a few times
// above the intrinsic bf16 noise and two orders of magnitude below a wrong formula. Also: herd's bf16
// run must be measurably different from its fp32 run (the bf16 path ran), and every recompute policy
// must meet the same bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "comm/comm_test_util.h"
#include "golden_file.h"
#include "herd/nn/init.h"
#include "herd/nn/model.h"
#include "herd/parallel/rank_model.h"

namespace herd {
namespace {

using testing::GoldenFile;

constexpr double kU = 0x1p-8;  // bf16 unit roundoff

// The float64 reference of the same model and batch (golden_test.cpp's file).
const GoldenFile& float64_reference() { return testing::golden_file("llama_tiny.bin"); }

const GoldenFile& bf16_golden() { return testing::golden_file("llama_tiny_bf16.bin"); }

model::LlamaConfig bf16_golden_config() { return testing::golden_model_config(bf16_golden()); }

struct HerdRun {
  std::vector<float> logits, grads;
  double loss = 0;
};

// One forward + backward of the golden batch on herd's one-rank production path.
HerdRun run_herd(bool bf16, model::Recompute recompute) {
  const model::LlamaConfig cfg = bf16_golden_config();
  const GoldenFile& g = bf16_golden();
  const nn::MicroBatch mb = testing::golden_batch(g);
  // The weights, in nn::LlamaModel's layout, from the same hash as the PyTorch side.
  nn::LlamaModel<float> layout(cfg, model::Recompute::kNone, 1, mb.seq_len);
  const std::vector<std::string> order = g.header["param_order"];
  for (std::size_t i = 0; i < order.size(); ++i) {
    const nn::NamedParam& p = layout.param(order[i]);
    nn::fill_uniform_golden(layout.params() + p.offset, p.count(), i,
                            g.header["init"][order[i]]["center"].get<double>(),
                            g.header["init"][order[i]]["scale"].get<double>());
  }
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < mb.rows(); ++i) count += mb.targets[i] >= 0;
  HerdRun out;
  comm::testing::run_ranks(1, [&](comm::Communicator& world) -> Status {
    HERD_ASSIGN_OR_RETURN(auto groups,
                          parallel::ParallelGroups::make(world, *topology::ParallelDims::make(1, 1, 1, 1)));
    parallel::ParallelContext ctx = groups->context();
    ctx.precision = bf16 ? Precision::kBF16 : Precision::kFP32;
    parallel::RankModelOptions o;
    o.recompute = recompute;
    o.micro_batch = mb.batch;
    o.seq_len = mb.seq_len;
    HERD_ASSIGN_OR_RETURN(auto m, parallel::RankModel<float>::make(ctx, cfg, o));
    m->load_full(layout.params());
    out.logits.resize(static_cast<std::size_t>(mb.rows() * cfg.vocab));
    HERD_RETURN_IF_ERROR(m->logits(mb, out.logits.data()));
    m->zero_grads();
    HERD_ASSIGN_OR_RETURN(auto l, m->forward_backward_step({mb}, 1.0f / static_cast<float>(count)));
    COMM_EXPECT(l.count == count);
    out.loss = l.loss_sum / static_cast<double>(l.count);
    HERD_ASSIGN_OR_RETURN(out.grads, m->gather_full(true));
    return Status::Ok();
  });
  return out;
}

TEST(GoldenBf16, LogitsLossAndEveryGradientMatchPyTorchAutocast) {
  const model::LlamaConfig cfg = bf16_golden_config();
  const nn::LlamaModel<float> layout(cfg, model::Recompute::kNone, 1, cfg.max_seq_len);
  const double want_loss = bf16_golden().header["loss"];
  const HerdRun fp32 = run_herd(false, model::Recompute::kNone);
  for (model::Recompute r : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    SCOPED_TRACE(model::recompute_name(r));
    const HerdRun h = run_herd(true, r);
    const double logits = testing::max_relative_error(h.logits.data(), bf16_golden().f32.at("logits"));
    EXPECT_LE(logits, 4 * kU);
    EXPECT_LE(std::fabs(h.loss - want_loss) / want_loss, kU / 2);
    double worst = 0;
    std::string worst_name;
    for (const nn::NamedParam& p : layout.named_params()) {
      const double e = testing::max_relative_error(h.grads.data() + p.offset, bf16_golden().f32.at("grad." + p.name));
      EXPECT_LE(e, 8 * kU) << "gradient of " << p.name;
      if (e > worst) worst = e, worst_name = p.name;
    }
    // herd's own fp32 numbers against the same bf16 reference: the size of bf16's effect here.
    double fp32_worst = 0;
    for (const nn::NamedParam& p : layout.named_params()) {
      fp32_worst = std::max(fp32_worst, testing::max_relative_error(fp32.grads.data() + p.offset,
                                                                    bf16_golden().f32.at("grad." + p.name)));
    }
    EXPECT_GT(testing::max_relative_error(h.logits.data(), fp32.logits), 0.1 * kU)
        << "the bf16 run looks like the fp32 one";
    // As accurate as PyTorch's autocast: herd's bf16 error against the float64 reference (logits and the
    // worst gradient tensor) at most twice autocast's own (the file's calibration).
    const Json& torch_err = bf16_golden().header["calibration"]["bf16_autocast_vs_float64"];
    const double herd_logits64 = testing::max_relative_error(h.logits.data(), float64_reference().f32.at("logits"));
    double herd_grads64 = 0;
    for (const nn::NamedParam& p : layout.named_params()) {
      herd_grads64 = std::max(herd_grads64, testing::max_relative_error(h.grads.data() + p.offset,
                                                                        float64_reference().f32.at("grad." + p.name)));
    }
    EXPECT_LE(herd_logits64, 2 * torch_err["logits"].get<double>());
    EXPECT_LE(herd_grads64, 2 * torch_err["grads_worst"].get<double>());
    std::printf("  vs float64: herd bf16 logits %.2e, worst gradient %.2e; PyTorch autocast %.2e, %.2e\n",
                herd_logits64, herd_grads64, torch_err["logits"].get<double>(), torch_err["grads_worst"].get<double>());
    std::printf(
        "golden bf16 (%s): logits %.2e, loss %.2e, worst gradient %.2e (%s) of max|ref| [u = %.2e]; herd fp32 vs the "
        "same reference: logits %.2e, worst gradient %.2e\n",
        model::recompute_name(r), logits, std::fabs(h.loss - want_loss) / want_loss, worst, worst_name.c_str(), kU,
        testing::max_relative_error(fp32.logits.data(), bf16_golden().f32.at("logits")), fp32_worst);
  }
}

}  // namespace
}  // namespace herd
