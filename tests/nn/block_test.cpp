// TransformerBlock: the backward of a whole block against central finite differences in double, the
// three recompute policies agreeing, and the bytes a layer keeps for its backward equal to
// model::layer_activation_bytes (the planner's number), tensor by tensor and by name.
#include "herd/nn/block.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/test_model.h"
#include "herd/kernels/convert.h"
#include "herd/model/activations.h"

namespace herd::nn {
namespace {

model::LlamaConfig small_config() {
  // Fast rotation (theta 100), so RoPE's backward matters at these positions.
  return herd::test_models::test_llama({.name = "block-test",
                                        .hidden = 16,
                                        .ffn = 32,
                                        .layers = 1,
                                        .head_dim = 4,
                                        .vocab = 32,
                                        .max_seq = 16,
                                        .rope_theta = 100.0});
}

// Two rows of 8 tokens: row 0 packs documents of 3 and 5 tokens, row 1 is one document.
struct Batch {
  std::vector<std::int32_t> pos = {0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<std::int32_t> doc = {0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<std::int32_t> tok = std::vector<std::int32_t>(16, 0);
  MicroBatch view() const { return {2, 8, tok.data(), tok.data(), pos.data(), doc.data()}; }
};

kernels::RopeTable<double> rope_table(const model::LlamaConfig& c) {
  kernels::RopeConfig rc;
  rc.head_dim = c.head_dim;
  rc.theta = c.rope_theta;
  return kernels::RopeTable<double>(rc, c.max_seq_len);
}

// loss = sum(out * r) for a fixed random r, so dLoss/dout = r.
struct Harness {
  model::LlamaConfig cfg = small_config();
  LayerSizes sizes = *layer_sizes(cfg);
  Batch batch;
  kernels::RopeTable<double> rope = rope_table(cfg);
  std::vector<double> x, r, w;
  tensor::Arena arena{1 << 20};

  Harness() {
    std::mt19937_64 g(7);
    std::normal_distribution<double> n(0, 1);
    const std::int64_t rows = batch.view().rows() * cfg.hidden;
    for (std::int64_t i = 0; i < rows; ++i) x.push_back(n(g));
    for (std::int64_t i = 0; i < rows; ++i) r.push_back(n(g));
    const LayerLayout L(sizes);
    w.resize(static_cast<std::size_t>(L.total));
    for (double& v : w) v = 0.3 * n(g);
    for (std::int64_t i = 0; i < cfg.hidden; ++i) {
      w[static_cast<std::size_t>(L.attn_norm + i)] += 1.0;
      w[static_cast<std::size_t>(L.mlp_norm + i)] += 1.0;
    }
  }

  double loss(TransformerBlock<double>& b, std::vector<double>& params) {
    std::vector<double> grads(params.size(), 0.0), y = x;
    b.bind(params.data(), grads.data());
    BlockState<double> st = b.forward(arena, batch.view(), rope, y.data());
    arena.reset(st.mark);
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
    return s;
  }

  // Analytic gradients: dx and the weight gradients.
  void backward(TransformerBlock<double>& b, std::vector<double>& dx, std::vector<double>& dw) {
    dw.assign(w.size(), 0.0);
    std::vector<double> y = x;
    b.bind(w.data(), dw.data());
    BlockState<double> st = b.forward(arena, batch.view(), rope, y.data());
    dx = r;
    b.backward(arena, batch.view(), rope, st, dx.data());
    EXPECT_EQ(arena.used(), 0u);
  }
};

TEST(TransformerBlock, BackwardMatchesFiniteDifferencesInDouble) {
  Harness h;
  TransformerBlock<double> block(h.sizes, model::Recompute::kNone);
  std::vector<double> dx, dw;
  h.backward(block, dx, dw);
  const double eps = 1e-6;
  double worst = 0;
  // Every input element, and every parameter.
  for (std::size_t i = 0; i < h.x.size(); ++i) {
    const double keep = h.x[i];
    h.x[i] = keep + eps;
    const double up = h.loss(block, h.w);
    h.x[i] = keep - eps;
    const double down = h.loss(block, h.w);
    h.x[i] = keep;
    const double fd = (up - down) / (2 * eps);
    worst = std::max(worst, std::fabs(fd - dx[i]) / std::max(1.0, std::fabs(fd)));
  }
  EXPECT_LT(worst, 1e-7) << "input gradient";
  worst = 0;
  for (std::size_t i = 0; i < h.w.size(); ++i) {
    std::vector<double> p = h.w;
    p[i] += eps;
    const double up = h.loss(block, p);
    p[i] -= 2 * eps;
    const double down = h.loss(block, p);
    const double fd = (up - down) / (2 * eps);
    worst = std::max(worst, std::fabs(fd - dw[i]) / std::max(1.0, std::fabs(fd)));
  }
  EXPECT_LT(worst, 1e-7) << "weight gradients";
}

TEST(TransformerBlock, RecomputePoliciesGiveTheSameGradients) {
  Harness h;
  TransformerBlock<double> none(h.sizes, model::Recompute::kNone);
  std::vector<double> dx0, dw0;
  h.backward(none, dx0, dw0);
  for (model::Recompute r : {model::Recompute::kSelective, model::Recompute::kFull}) {
    TransformerBlock<double> b(h.sizes, r);
    std::vector<double> dx, dw;
    h.backward(b, dx, dw);
    for (std::size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(dx[i], dx0[i], 1e-12) << model::recompute_name(r);
    for (std::size_t i = 0; i < dw.size(); ++i) ASSERT_NEAR(dw[i], dw0[i], 1e-12) << model::recompute_name(r);
  }
}

template <typename T>
void check_saved_bytes(model::Recompute policy) {
  SCOPED_TRACE(model::recompute_name(policy));
  const model::LlamaConfig cfg = small_config();
  const LayerSizes sizes = *layer_sizes(cfg);
  Batch batch;
  kernels::RopeConfig rc;
  rc.head_dim = cfg.head_dim;
  const kernels::RopeTable<T> rope(rc, cfg.max_seq_len);
  std::vector<T> w(static_cast<std::size_t>(LayerLayout(sizes).total), T(0.1)), g(w.size(), T(0));
  std::vector<T> x(static_cast<std::size_t>(batch.view().rows() * cfg.hidden), T(0.5));
  tensor::Arena arena(1 << 20);
  TransformerBlock<T> block(sizes, policy, "L0.");
  block.bind(w.data(), g.data());
  BlockState<T> st = block.forward(arena, batch.view(), rope, x.data());

  model::ActivationShape shape;
  shape.seq_len = batch.view().seq_len;
  shape.micro_batch = batch.view().batch;
  shape.dtype = dtype_of<T>();
  shape.recompute = policy;
  // Every listed tensor is held under its name, with the listed bytes; nothing else is held.
  std::int64_t listed = 0;
  for (const model::SavedTensor& t : model::layer_saved_tensors(cfg, shape)) {
    EXPECT_EQ(arena.tags().at("L0." + t.name).current, static_cast<std::size_t>(t.bytes())) << t.name;
    listed += t.bytes();
  }
  std::size_t held = 0;
  for (const auto& [tag, stats] : arena.tags()) held += stats.current;
  EXPECT_EQ(held, static_cast<std::size_t>(listed));
  EXPECT_EQ(arena.used() - st.mark.offset, static_cast<std::size_t>(model::layer_activation_bytes(cfg, shape)));
  block.backward(arena, batch.view(), rope, st, x.data());
  EXPECT_EQ(arena.used(), 0u);
}

TEST(TransformerBlock, KeepsExactlyThePlannersActivationList) {
  for (model::Recompute r : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    check_saved_bytes<float>(r);
    check_saved_bytes<double>(r);
  }
}

// bf16 mode: the same names at the planner's bf16 sizes (activations bf16, statistics fp32).
TEST(TransformerBlock, Bf16KeepsThePlannersBf16ActivationList) {
  for (model::Recompute policy : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    SCOPED_TRACE(model::recompute_name(policy));
    const model::LlamaConfig cfg = small_config();
    const LayerSizes sizes = *layer_sizes(cfg);
    Batch batch;
    kernels::RopeConfig rc;
    rc.head_dim = cfg.head_dim;
    const kernels::RopeTable<float> rope(rc, cfg.max_seq_len);
    std::vector<bf16> w(static_cast<std::size_t>(LayerLayout(sizes).total), to_bf16(0.1f));
    std::vector<float> g(w.size(), 0.f), x(static_cast<std::size_t>(batch.view().rows() * cfg.hidden), 0.5f);
    tensor::Arena arena(1 << 20);
    TransformerBlock<float> block(sizes, policy, "L0.", /*bf16_mode=*/true);
    block.bind_bf16(w.data(), g.data());
    BlockState<float> st = block.forward(arena, batch.view(), rope, x.data());
    model::ActivationShape shape;
    shape.seq_len = batch.view().seq_len;
    shape.micro_batch = batch.view().batch;
    shape.dtype = DType::kBF16;
    shape.recompute = policy;
    std::int64_t listed = 0;
    for (const model::SavedTensor& t : model::layer_saved_tensors(cfg, shape)) {
      EXPECT_EQ(arena.tags().at("L0." + t.name).current, static_cast<std::size_t>(t.bytes())) << t.name;
      listed += t.bytes();
    }
    std::size_t held = 0;
    for (const auto& [tag, stats] : arena.tags()) held += stats.current;
    EXPECT_EQ(held, static_cast<std::size_t>(listed));
    block.backward(arena, batch.view(), rope, st, x.data());
    EXPECT_EQ(arena.used(), 0u);
  }
}

// The bf16 block against the double block on the same (bf16-representable) weights: what differs is
// the rounding of the activations to 8 bits of precision (u = 2^-8) where the block saves them or
// feeds them to a GEMM, so output and gradients agree to a small multiple of u relative to their
// largest entry (docs/precision.md). none and selective see the same rounded tensors: bit-identical.
TEST(TransformerBlock, Bf16ModeMatchesTheDoubleBlockWithinBf16Rounding) {
  Harness h;
  std::vector<bf16> w16(h.w.size());
  for (std::size_t i = 0; i < h.w.size(); ++i) {
    w16[i] = to_bf16(static_cast<float>(h.w[i]));
    h.w[i] = static_cast<double>(to_float(w16[i]));
  }
  TransformerBlock<double> ref(h.sizes, model::Recompute::kNone);
  std::vector<double> dx_ref, dw_ref, y_ref = h.x;
  h.backward(ref, dx_ref, dw_ref);
  {
    std::vector<double> g(h.w.size(), 0.0);
    ref.bind(h.w.data(), g.data());
    BlockState<double> st = ref.forward(h.arena, h.batch.view(), h.rope, y_ref.data());
    h.arena.reset(st.mark);
  }
  kernels::RopeConfig rc;
  rc.head_dim = h.cfg.head_dim;
  rc.theta = h.cfg.rope_theta;
  const kernels::RopeTable<float> rope(rc, h.cfg.max_seq_len);
  auto rel = [](const std::vector<float>& a, const std::vector<double>& b) {
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < b.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
      scale = std::max(scale, std::fabs(b[i]));
    }
    return diff / scale;
  };
  std::vector<float> dx_none, dw_none;
  for (model::Recompute policy : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
    SCOPED_TRACE(model::recompute_name(policy));
    TransformerBlock<float> b(h.sizes, policy, "", true);
    std::vector<float> g(h.w.size(), 0.f), y(h.x.begin(), h.x.end());
    b.bind_bf16(w16.data(), g.data());
    tensor::Arena arena(1 << 20);
    BlockState<float> st = b.forward(arena, h.batch.view(), rope, y.data());
    EXPECT_LT(rel(y, y_ref), 4 * 0x1p-8) << "output";
    std::vector<float> dx(h.r.begin(), h.r.end());
    b.backward(arena, h.batch.view(), rope, st, dx.data());
    EXPECT_LT(rel(dx, dx_ref), 8 * 0x1p-8) << "input gradient";
    EXPECT_LT(rel(g, dw_ref), 8 * 0x1p-8) << "weight gradients";
    EXPECT_GT(rel(g, dw_ref), 1e-6) << "bf16 rounding left no trace: not the bf16 path";
    std::printf("bf16 block (%s) vs double: output %.2e, dx %.2e, dw %.2e (u = %.2e)\n", model::recompute_name(policy),
                rel(y, y_ref), rel(dx, dx_ref), rel(g, dw_ref), 0x1p-8);
    if (policy == model::Recompute::kNone) {
      dx_none = dx;
      dw_none = g;
    } else if (policy == model::Recompute::kSelective) {
      EXPECT_EQ(dx, dx_none);
      EXPECT_EQ(g, dw_none);
    }
  }
}

}  // namespace
}  // namespace herd::nn
