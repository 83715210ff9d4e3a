// Golden parity with PyTorch (tools/llama_golden.py, tests/train/golden/llama_tiny.bin): a tiny Llama 3
// on a packed batch of several documents (document mask, positions restarting per document, ignored
// targets). herd in fp32 must match the float64 reference's logits, loss and every gradient within
// 1e-5 relative (max |herd - ref| / max |ref| per tensor), and the losses of 10 AdamW steps with
// gradient clipping within 1e-5 relative. The double build of the same layers must match to 2e-7
// (the reference is stored as float32, which bounds what can be checked).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "golden_file.h"
#include "herd/nn/init.h"
#include "herd/nn/model.h"
#include "train/reference_adamw.h"

namespace herd {
namespace {

using testing::GoldenFile;

const GoldenFile& golden() { return testing::golden_file("llama_tiny.bin"); }

model::LlamaConfig golden_config() {
  const Json& c = golden().header["config"];
  model::LlamaConfig cfg = testing::golden_model_config(golden());
  EXPECT_EQ(c["rope_style"], "half");
  return cfg;
}

template <typename T>
void load_golden_weights(nn::LlamaModel<T>& m) {
  const Json& h = golden().header;
  const std::vector<std::string> order = h["param_order"];
  ASSERT_EQ(order.size(), m.named_params().size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    ASSERT_EQ(order[i], m.named_params()[i].name);
    const nn::NamedParam& p = m.named_params()[i];
    nn::fill_uniform_golden(m.params() + p.offset, p.count(), i, h["init"][order[i]]["center"].get<double>(),
                            h["init"][order[i]]["scale"].get<double>());
  }
}

nn::MicroBatch golden_batch() { return testing::golden_batch(golden()); }

std::int64_t real_tokens(const nn::MicroBatch& mb) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < mb.rows(); ++i) n += mb.targets[i] >= 0;
  return n;
}

template <typename T>
void check_forward_backward(double tol) {
  const model::LlamaConfig cfg = golden_config();
  const nn::MicroBatch mb = golden_batch();
  for (model::Recompute r : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    SCOPED_TRACE(model::recompute_name(r));
    nn::LlamaModel<T> m(cfg, r, mb.batch, mb.seq_len);
    load_golden_weights(m);
    std::vector<T> logits(static_cast<std::size_t>(mb.rows() * cfg.vocab));
    m.logits(mb, logits.data());
    EXPECT_LE(testing::max_relative_error(logits.data(), golden().f32.at("logits")), tol);

    const std::int64_t count = real_tokens(mb);
    const kernels::CrossEntropyLoss l = m.forward_backward(mb, T(1) / static_cast<T>(count));
    EXPECT_EQ(l.count, count);
    const double ref = golden().header["loss"];
    EXPECT_NEAR(l.loss_sum / static_cast<double>(l.count), ref, tol * ref);
    for (const nn::NamedParam& p : m.named_params()) {
      const double rel = testing::max_relative_error(m.grads() + p.offset, golden().f32.at("grad." + p.name));
      EXPECT_LE(rel, tol) << "gradient of " << p.name;
    }
  }
}

TEST(Golden, Fp32LogitsLossAndEveryGradientMatchPyTorch) { check_forward_backward<float>(1e-5); }
TEST(Golden, Fp64LogitsLossAndEveryGradientMatchPyTorch) { check_forward_backward<double>(2e-7); }

TEST(Golden, TenAdamWStepsMatchPyTorch) {
  const model::LlamaConfig cfg = golden_config();
  const nn::MicroBatch mb = golden_batch();
  const Json& o = golden().header["optimizer"];
  nn::LlamaModel<float> m(cfg, model::Recompute::kNone, mb.batch, mb.seq_len);
  load_golden_weights(m);
  train::AdamW<float> opt(m.param_count());
  kernels::AdamWConfig ac;
  ac.beta1 = o["beta1"];
  ac.beta2 = o["beta2"];
  ac.eps = o["eps"];
  ac.weight_decay = o["weight_decay"];
  const std::vector<double> want = golden().header["step_losses"];
  const std::vector<double> want_norms = golden().header["step_grad_norms"];
  const std::int64_t count = real_tokens(mb);
  for (std::size_t s = 0; s < want.size(); ++s) {
    m.zero_grads();
    const kernels::CrossEntropyLoss l = m.forward_backward(mb, 1.0f / static_cast<float>(count));
    const double loss = l.loss_sum / static_cast<double>(l.count);
    EXPECT_NEAR(loss, want[s], 1e-5 * want[s]) << "step " << s;
    const double norm = opt.step(m.params(), m.grads(), ac, o["lr"].get<double>(), o["clip"].get<double>());
    EXPECT_NEAR(norm, want_norms[s], 1e-5 * want_norms[s]) << "gradient norm at step " << s;
  }
}

}  // namespace
}  // namespace herd
