// Layer-level parity: a TP transformer block built from chunks of a single-rank block (q/k/v and
// gate/up rows, o and down columns, norms replicated) reproduces the single-rank block's output, its
// input gradient and every weight gradient, for tp = 2 and 4 with sequence parallelism on and off.
// The slicing here is written independently of parallel/model.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "comm/comm_test_util.h"
#include "herd/nn/init.h"
#include "herd/parallel/context.h"
#include "herd/parallel/tp/collectives.h"
#include "parallel/model_test_util.h"

namespace herd::parallel::tp {
namespace {

using parallel::testing::make_batch;
using parallel::testing::small_gqa_model;

kernels::RopeTable<double> rope_table(const model::LlamaConfig& cfg) {
  kernels::RopeConfig rc;
  rc.head_dim = cfg.head_dim;
  rc.theta = cfg.rope_theta;
  rc.layout = kernels::RopeLayout::kHalf;
  return kernels::RopeTable<double>(rc, cfg.max_seq_len);
}

double max_rel(const double* a, const double* b, std::int64_t n) {
  double diff = 0, scale = 1e-300;
  for (std::int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

void check_block(int tp, bool sp, model::Recompute rc) {
  SCOPED_TRACE("tp" + std::to_string(tp) + (sp ? " sp" : " nosp") + " recompute " +
               std::to_string(static_cast<int>(rc)));
  const model::LlamaConfig cfg = small_gqa_model();
  const auto batch = make_batch(2, 8, cfg.vocab, 21);
  const nn::MicroBatch mb = batch.rows(0, 2);
  const std::int64_t n = mb.rows(), d = cfg.hidden;
  const auto rope = rope_table(cfg);

  // The single-rank block.
  const nn::LayerSizes fs = *nn::layer_sizes(cfg, 1);
  nn::TransformerBlock<double> full(fs, rc);
  const nn::LayerLayout FL = full.layout();
  std::vector<double> w(static_cast<std::size_t>(FL.total)), g(w.size(), 0.0);
  nn::fill_normal(w.data(), FL.total, 3, 0, 0.3);
  for (std::int64_t i = 0; i < d; ++i)
    w[FL.attn_norm + i] = 1 + 0.1 * std::sin(i), w[FL.mlp_norm + i] = 1 - 0.1 * i / d;
  full.bind(w.data(), g.data());
  std::vector<double> x(static_cast<std::size_t>(n * d)), dy(x.size());
  nn::fill_normal(x.data(), n * d, 4, 0, 1.0);
  nn::fill_normal(dy.data(), n * d, 5, 0, 1.0);
  std::vector<double> out = x, dx = dy;
  tensor::Arena arena(1 << 22);
  auto st = full.forward(arena, mb, rope, out.data());
  full.backward(arena, mb, rope, st, dx.data());

  const topology::ParallelDims dims = *topology::ParallelDims::make(tp, 1, 1, 1);
  comm::testing::run_ranks(tp, [&](comm::Communicator& world) -> Status {
    HERD_ASSIGN_OR_RETURN(auto groups, ParallelGroups::make(world, dims));
    const int r = world.rank();
    TpCollectives<double> c(groups->tp(), sp);
    const nn::LayerSizes ls = *nn::layer_sizes(cfg, tp);
    nn::TransformerBlock<double> block(ls, rc);
    block.set_tensor_parallel(&c);
    const nn::LayerLayout LL = block.layout();
    std::vector<double> wl(static_cast<std::size_t>(LL.total)), gl(wl.size(), 0.0);
    // rows [r*R/tp, ...) of a (R, C) weight; columns [r*C/tp, ...) of a (R, C) weight.
    auto rows = [&](std::int64_t f_off, std::int64_t l_off, std::int64_t R, std::int64_t C, const double* src,
                    double* dst) {
      std::memcpy(dst + l_off, src + f_off + r * (R / tp) * C, sizeof(double) * static_cast<std::size_t>(R / tp * C));
    };
    auto cols = [&](std::int64_t f_off, std::int64_t l_off, std::int64_t R, std::int64_t C, const double* src,
                    double* dst) {
      for (std::int64_t i = 0; i < R; ++i) {
        for (std::int64_t j = 0; j < C / tp; ++j) dst[l_off + i * (C / tp) + j] = src[f_off + i * C + r * (C / tp) + j];
      }
    };
    auto slice = [&](const double* src, double* dst) {
      std::memcpy(dst + LL.attn_norm, src + FL.attn_norm, sizeof(double) * static_cast<std::size_t>(d));
      std::memcpy(dst + LL.mlp_norm, src + FL.mlp_norm, sizeof(double) * static_cast<std::size_t>(d));
      rows(FL.wq, LL.wq, fs.q_dim(), d, src, dst);
      rows(FL.wk, LL.wk, fs.kv_dim(), d, src, dst);
      rows(FL.wv, LL.wv, fs.kv_dim(), d, src, dst);
      cols(FL.wo, LL.wo, d, fs.q_dim(), src, dst);
      rows(FL.w_gate, LL.w_gate, fs.ffn, d, src, dst);
      rows(FL.w_up, LL.w_up, fs.ffn, d, src, dst);
      cols(FL.w_down, LL.w_down, d, fs.ffn, src, dst);
    };
    slice(w.data(), wl.data());
    block.bind(wl.data(), gl.data());
    const std::int64_t nl = c.local_rows(n), r0 = sp ? r * nl : 0;
    std::vector<double> xl(x.begin() + r0 * d, x.begin() + (r0 + nl) * d);
    std::vector<double> dxl(dy.begin() + r0 * d, dy.begin() + (r0 + nl) * d);
    tensor::Arena a(1 << 22);
    auto s = block.forward(a, mb, rope, xl.data());
    block.backward(a, mb, rope, s, dxl.data());
    HERD_RETURN_IF_ERROR(c.status());
    // With SP each rank's norm-weight gradient covers its rows only: the model sums them over TP.
    if (sp) {
      c.all_reduce(gl.data() + LL.attn_norm, d);
      c.all_reduce(gl.data() + LL.mlp_norm, d);
    }
    COMM_EXPECT(max_rel(xl.data(), out.data() + r0 * d, nl * d) <= 1e-12, "block output");
    COMM_EXPECT(max_rel(dxl.data(), dx.data() + r0 * d, nl * d) <= 1e-12, "input gradient");
    std::vector<double> want(wl.size());
    slice(g.data(), want.data());
    const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> parts[] = {
        {"attn_norm", {LL.attn_norm, d}},    {"wq", {LL.wq, ls.q_dim() * d}}, {"wk", {LL.wk, ls.kv_dim() * d}},
        {"wv", {LL.wv, ls.kv_dim() * d}},    {"wo", {LL.wo, d * ls.q_dim()}}, {"mlp_norm", {LL.mlp_norm, d}},
        {"w_gate", {LL.w_gate, ls.ffn * d}}, {"w_up", {LL.w_up, ls.ffn * d}}, {"w_down", {LL.w_down, d * ls.ffn}}};
    for (const auto& [nm, range] : parts) {
      const double e = max_rel(gl.data() + range.first, want.data() + range.first, range.second);
      COMM_EXPECT(e <= 1e-12, "gradient of ", nm, " differs by ", e);
    }
    return Status::Ok();
  });
}

TEST(TensorParallelBlock, ChunksOfASingleRankBlockReproduceIt) {
  for (int tp : {2, 4}) {
    for (bool sp : {true, false}) check_block(tp, sp, model::Recompute::kNone);
  }
  check_block(2, true, model::Recompute::kSelective);
  check_block(4, true, model::Recompute::kFull);
}

}  // namespace
}  // namespace herd::parallel::tp
