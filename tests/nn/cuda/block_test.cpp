// nn::TransformerBlock on a GPU: the block given ops_for(Device::kCuda) (kernels/ops.h), with its
// weights, gradients, activations (an arena over a device Buffer), residual stream and the micro-batch's
// positions and document ids in device memory, against the same block given the CPU's interface on
// the same inputs: the output, dLoss/dx and every weight gradient, in fp32 and in bf16 mode, under each
// recompute policy. The first check of the step's own code on a device; skipped without a GPU.
#include "herd/nn/block.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/test_model.h"
#include "herd/kernels/cuda/kernels.h"
#include "herd/kernels/ops.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::nn {
namespace {

using kernels::cuda::testing::random_vector;

model::LlamaConfig config() {
  // Head width 32 (a multiple of 16: the bf16 tensor-core attention), GQA 8/2, two documents per row.
  return test_models::test_llama({.name = "block-device-test",
                                  .hidden = 256,
                                  .ffn = 512,
                                  .layers = 1,
                                  .heads = 8,
                                  .kv_heads = 2,
                                  .head_dim = 32,
                                  .vocab = 64,
                                  .max_seq = 128});
}

struct Inputs {
  std::int64_t batch = 2, seq = 96;
  std::vector<std::int32_t> pos, doc, tok;
  std::vector<float> x, dout, w;
  explicit Inputs(const LayerSizes& sizes) {
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t t = 0; t < seq; ++t) {
        const bool second = t >= 40;
        pos.push_back(static_cast<std::int32_t>(second ? t - 40 : t));
        doc.push_back(second ? 1 : 0);
        tok.push_back(0);
      }
    }
    x = random_vector(batch * seq * sizes.hidden, 1);
    dout = random_vector(batch * seq * sizes.hidden, 2);
    const LayerLayout L(sizes);
    w = random_vector(L.total, 3, -0.08f, 0.08f);
    for (std::int64_t i = 0; i < sizes.hidden; ++i) {
      w[static_cast<std::size_t>(L.attn_norm + i)] += 1.0f;
      w[static_cast<std::size_t>(L.mlp_norm + i)] += 1.0f;
    }
  }
};

struct Result {
  std::vector<float> out, dx, grads;
};

template <typename T>
kernels::Buffer upload(const kernels::Ops& ops, const std::vector<T>& host) {
  kernels::Buffer b(ops, host.size() * sizeof(T));
  ops.copy_from_host(host.data(), b.data(), b.bytes());
  return b;
}

template <typename T>
std::vector<T> download(const kernels::Ops& ops, const kernels::Buffer& b) {
  std::vector<T> host(b.bytes() / sizeof(T));
  ops.copy_to_host(b.data(), host.data(), b.bytes());
  return host;
}

// Forward and backward of one block on `ops`'s device, every buffer of it there.
Result run(const kernels::Ops& ops, const LayerSizes& sizes, const Inputs& in, const kernels::RopeTable<float>& rope,
           bool bf16_mode, model::Recompute policy) {
  kernels::Buffer pos = upload(ops, in.pos), doc = upload(ops, in.doc), tok = upload(ops, in.tok);
  const MicroBatch mb{
      in.batch, in.seq, tok.as<std::int32_t>(), tok.as<std::int32_t>(), pos.as<std::int32_t>(), doc.as<std::int32_t>()};
  kernels::Buffer arena_memory(ops, std::size_t{64} << 20);
  tensor::Arena arena(arena_memory.data(), arena_memory.bytes());
  kernels::Buffer x = upload(ops, in.x), dx = upload(ops, in.dout), w = upload(ops, in.w);
  kernels::Buffer g = kernels::zeroed_array<float>(ops, static_cast<std::int64_t>(in.w.size()));
  kernels::Buffer w16 = kernels::array_of<bf16>(ops, static_cast<std::int64_t>(in.w.size()));
  TransformerBlock<float> block(sizes, policy, "L0.", bf16_mode, ops);
  if (bf16_mode) {
    ops.to_bf16(w.as<float>(), static_cast<std::int64_t>(in.w.size()), w16.as<bf16>());
    block.bind_bf16(w16.as<bf16>(), g.as<float>());
  } else {
    block.bind(w.as<float>(), g.as<float>());
  }
  BlockState<float> st = block.forward(arena, mb, rope, x.as<float>());
  Result r;
  r.out = download<float>(ops, x);
  block.backward(arena, mb, rope, st, dx.as<float>());
  r.dx = download<float>(ops, dx);
  r.grads = download<float>(ops, g);
  ops.synchronize();
  return r;
}

// max |a - b| relative to max(1, max |b|).
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

TEST(CudaBlock, MatchesTheBlockOnTheCpusInterface) {
  HERD_REQUIRE_GPU();
  const model::LlamaConfig cfg = config();
  const LayerSizes sizes = *layer_sizes(cfg);
  const Inputs in(sizes);
  kernels::RopeConfig rc;
  rc.head_dim = cfg.head_dim;
  rc.theta = cfg.rope_theta;
  const kernels::RopeTable<float> rope(rc, cfg.max_seq_len);
  for (const bool bf16_mode : {false, true}) {
    for (model::Recompute policy : {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
      SCOPED_TRACE(::testing::Message() << (bf16_mode ? "bf16 " : "fp32 ") << model::recompute_name(policy));
      const Result want = run(kernels::cpu_ops(), sizes, in, rope, bf16_mode, policy);
      const Result got = run(kernels::cuda::device_ops(), sizes, in, rope, bf16_mode, policy);
      // fp32: the same math summed in another order. bf16: that order can move a value across a bf16
      // rounding boundary where a tensor is saved or enters a GEMM (u = 2^-8).
      const double tol = bf16_mode ? 3e-2 : 1e-4;
      EXPECT_LT(rel_error(got.out, want.out), tol);
      EXPECT_LT(rel_error(got.dx, want.dx), tol);
      EXPECT_LT(rel_error(got.grads, want.grads), tol);
    }
  }
}

}  // namespace
}  // namespace herd::nn
