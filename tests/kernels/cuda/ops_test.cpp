// The CUDA op interface (kernels/ops.h, kernels/cuda/ops.cu) against the CPU's: its memory methods
// against host loops, and each method it composes from several CUDA kernels (the bf16 RMSNorm and
// RoPE variants, the bf16 attention forward's fp32 output, the one-shard loss, AdamW's clip factor
// and bf16 copy) against ops_for(Device::kCpu) on the same inputs. Skipped without a GPU.
#include "herd/kernels/ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "herd/kernels/cuda/kernels.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

using testing::all_close;
using testing::random_vector;
using testing::to_bf16_host;

const Ops& gpu() { return device_ops(); }
const Ops& cpu() { return ops_for(Device::kCpu); }

template <typename T>
Buffer up(const std::vector<T>& host) {
  Buffer b(gpu(), host.size() * sizeof(T));
  gpu().copy_from_host(host.data(), b.data(), b.bytes());
  return b;
}

template <typename T>
std::vector<T> down(const Buffer& b) {
  std::vector<T> host(b.bytes() / sizeof(T));
  gpu().copy_to_host(b.data(), host.data(), b.bytes());
  return host;
}

std::vector<float> widened(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = herd::to_float(v[i]);
  return out;
}

TEST(CudaOps, RegisteredWithDeviceMemory) {
  HERD_REQUIRE_GPU();
  ASSERT_TRUE(has_ops(Device::kCuda));
  EXPECT_EQ(&ops_for(Device::kCuda), &gpu());
  EXPECT_EQ(gpu().device(), Device::kCuda);
  const std::vector<float> x = random_vector(1000, 1);
  Buffer b = up(x);
  EXPECT_EQ(b.device(), Device::kCuda);
  EXPECT_EQ(down<float>(b), x);

  Buffer c = zeroed_array<float>(gpu(), 1000);
  EXPECT_EQ(down<float>(c), std::vector<float>(1000, 0.0f));
  gpu().copy(b.data(), c.data(), b.bytes());
  EXPECT_EQ(down<float>(c), x);
  std::vector<float> want = x;
  gpu().add(b.as<float>(), 1000, c.as<float>());
  for (float& v : want) v += v;
  EXPECT_EQ(down<float>(c), want);

  // 5 rows of 3 floats from a 7-wide source to a 4-wide destination.
  const std::vector<float> src = random_vector(5 * 7, 2);
  Buffer s = up(src), d = zeroed_array<float>(gpu(), 5 * 4);
  gpu().copy_rows(s.as<float>() + 2, 7 * sizeof(float), d.as<float>() + 1, 4 * sizeof(float), 3 * sizeof(float), 5);
  const std::vector<float> got = down<float>(d);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(got[r * 4], 0.0f) << r;
    for (int k = 0; k < 3; ++k) EXPECT_EQ(got[r * 4 + 1 + k], src[r * 7 + 2 + k]) << r << "," << k;
  }
}

TEST(CudaOps, Bf16RmsNormMatchesTheCpuInterface) {
  HERD_REQUIRE_GPU();
  const std::int64_t n = 33, dim = 200, ldx = 210, ldy = 205;
  const std::vector<bf16> x = to_bf16_host(random_vector(n * ldx, 3, -2.0f, 2.0f));
  const std::vector<float> w = random_vector(dim, 4, 0.5f, 1.5f), dy = random_vector(n * dim, 5);
  std::vector<bf16> y(n * ldy);
  std::vector<float> rstd(n);
  cpu().rmsnorm_forward(x.data(), ldx, w.data(), n, dim, 1e-5, y.data(), ldy, rstd.data());
  Buffer gx = up(x), gw = up(w), gy = up(std::vector<bf16>(n * ldy)), gr = up(std::vector<float>(n));
  gpu().rmsnorm_forward(gx.as<bf16>(), ldx, gw.as<float>(), n, dim, 1e-5, gy.as<bf16>(), ldy, gr.as<float>());
  EXPECT_TRUE(all_close(down<float>(gr), rstd, 1e-6, 1e-5));
  std::vector<float> got = widened(down<bf16>(gy)), want = widened(y);
  for (std::int64_t i = 0; i < n; ++i) {  // the rows; the padding is not the kernel's
    const std::vector<float> a(got.begin() + i * ldy, got.begin() + i * ldy + dim);
    const std::vector<float> b(want.begin() + i * ldy, want.begin() + i * ldy + dim);
    EXPECT_TRUE(all_close(a, b, 1e-2, 1e-2)) << "row " << i;
  }

  std::vector<float> dx(n * dim), dw(dim, 0.25f);
  cpu().rmsnorm_backward(dy.data(), dim, x.data(), ldx, w.data(), rstd.data(), n, dim, dx.data(), dim,
                         Accumulate::kOverwrite, dw.data());
  Buffer gdy = up(dy), gdx = up(std::vector<float>(n * dim)), gdw = up(std::vector<float>(dim, 0.25f));
  gpu().rmsnorm_backward(gdy.as<float>(), dim, gx.as<bf16>(), ldx, gw.as<float>(), gr.as<float>(), n, dim,
                         gdx.as<float>(), dim, Accumulate::kOverwrite, gdw.as<float>());
  EXPECT_TRUE(all_close(down<float>(gdx), dx, 1e-5, 1e-4));
  EXPECT_TRUE(all_close(down<float>(gdw), dw, 1e-4, 1e-4));
}

TEST(CudaOps, RopeToBf16MatchesTheCpuInterface) {
  HERD_REQUIRE_GPU();
  RopeConfig cfg;
  cfg.head_dim = 64;
  const RopeTable<float> table(cfg, 256);
  const std::int64_t n = 40, heads = 4, ld = heads * cfg.head_dim + 32;
  std::vector<std::int32_t> pos(n);
  for (std::int64_t i = 0; i < n; ++i) pos[i] = static_cast<std::int32_t>((i * 37) % 256);
  const std::vector<float> x = random_vector(n * ld, 6);
  Buffer gx = up(x), gpos = up(pos);
  for (const bool forward : {true, false}) {
    std::vector<bf16> out(n * ld);
    Buffer gout = up(std::vector<bf16>(n * ld));
    if (forward) {
      cpu().rope_forward(table, pos.data(), n, heads, x.data(), ld, out.data());
      gpu().rope_forward(table, gpos.as<std::int32_t>(), n, heads, gx.as<float>(), ld, gout.as<bf16>());
    } else {
      cpu().rope_backward(table, pos.data(), n, heads, x.data(), ld, out.data());
      gpu().rope_backward(table, gpos.as<std::int32_t>(), n, heads, gx.as<float>(), ld, gout.as<bf16>());
    }
    const std::vector<float> got = widened(down<bf16>(gout)), want = widened(out);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::vector<float> a(got.begin() + i * ld, got.begin() + i * ld + heads * cfg.head_dim);
      const std::vector<float> b(want.begin() + i * ld, want.begin() + i * ld + heads * cfg.head_dim);
      EXPECT_TRUE(all_close(a, b, 1e-2, 1e-2)) << (forward ? "forward" : "backward") << " row " << i;
    }
    EXPECT_EQ(down<float>(gx), x) << "x is left as it was";
  }
}

TEST(CudaOps, Bf16AttentionForwardMatchesTheCpuInterface) {
  HERD_REQUIRE_GPU();
  AttentionDims d;
  d.batch = 2;
  d.tq = d.tk = 96;
  d.q_heads = 8;
  d.kv_heads = 2;
  d.head_dim = 64;
  std::vector<std::int32_t> pos(d.batch * d.tq);
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int32_t>(i % d.tq);
  const std::int64_t nq = d.batch * d.tq * d.q_heads * d.head_dim, nkv = d.batch * d.tk * d.kv_heads * d.head_dim;
  const std::vector<bf16> q = to_bf16_host(random_vector(nq, 7)), k = to_bf16_host(random_vector(nkv, 8)),
                          v = to_bf16_host(random_vector(nkv, 9));
  std::vector<float> out(nq), lse(d.batch * d.q_heads * d.tq);
  const AttentionMask hm{pos.data(), nullptr, pos.data(), nullptr};
  cpu().attention_forward(d, hm, q.data(), k.data(), v.data(), out.data(), lse.data());
  Buffer gpos = up(pos), gq = up(q), gk = up(k), gv = up(v), gout = up(std::vector<float>(nq)),
         glse = up(std::vector<float>(lse.size()));
  const AttentionMask dm{gpos.as<std::int32_t>(), nullptr, gpos.as<std::int32_t>(), nullptr};
  gpu().attention_forward(d, dm, gq.as<bf16>(), gk.as<bf16>(), gv.as<bf16>(), gout.as<float>(), glse.as<float>());
  EXPECT_TRUE(all_close(down<float>(gout), out, 1e-2, 1e-2));
  EXPECT_TRUE(all_close(down<float>(glse), lse, 1e-3, 1e-3));
}

TEST(CudaOps, OneShardLossMatchesTheCpuInterface) {
  HERD_REQUIRE_GPU();
  const std::int64_t n = 50, dim = 64, vocab = 1000;
  const std::vector<float> h = random_vector(n * dim, 10), w = random_vector(vocab * dim, 11, -0.2f, 0.2f);
  std::vector<std::int32_t> targets(n);
  for (std::int64_t i = 0; i < n; ++i)
    targets[i] = i % 7 == 3 ? kIgnoreIndex : static_cast<std::int32_t>(i * 19 % vocab);
  Buffer gh = up(h), gw = up(w), gt = up(targets);
  std::vector<float> lse(n);
  const CrossEntropyLoss want =
      cpu().cross_entropy_forward(h.data(), n, dim, w.data(), vocab, targets.data(), lse.data());
  Buffer glse = up(std::vector<float>(n));
  const CrossEntropyLoss got = gpu().cross_entropy_forward(gh.as<float>(), n, dim, gw.as<float>(), vocab,
                                                           gt.as<std::int32_t>(), glse.as<float>());
  EXPECT_EQ(got.count, want.count);
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-4 * std::abs(want.loss_sum));
  EXPECT_TRUE(all_close(down<float>(glse), lse, 1e-4, 1e-5));

  const float scale = 1.0f / static_cast<float>(want.count);
  std::vector<float> dh(n * dim, 0.0f), dw(vocab * dim, 0.0f);
  cpu().cross_entropy_forward_backward(h.data(), n, dim, w.data(), vocab, targets.data(), scale, lse.data(), dh.data(),
                                       dw.data());
  Buffer gdh = zeroed_array<float>(gpu(), n * dim), gdw = zeroed_array<float>(gpu(), vocab * dim);
  const CrossEntropyLoss fb =
      gpu().cross_entropy_forward_backward(gh.as<float>(), n, dim, gw.as<float>(), vocab, gt.as<std::int32_t>(), scale,
                                           glse.as<float>(), gdh.as<float>(), gdw.as<float>());
  EXPECT_NEAR(fb.loss_sum, want.loss_sum, 1e-4 * std::abs(want.loss_sum));
  EXPECT_TRUE(all_close(down<float>(gdh), dh, 1e-6, 1e-4));
  EXPECT_TRUE(all_close(down<float>(gdw), dw, 1e-6, 1e-4));

  // bf16 h and w: the same composition over the bf16 kernels.
  const std::vector<bf16> h16 = to_bf16_host(h), w16 = to_bf16_host(w);
  std::vector<float> lse16(n), dh16(n * dim, 0.0f), dw16(vocab * dim, 0.0f);
  const CrossEntropyLoss want16 = cpu().cross_entropy_forward_backward(
      h16.data(), n, dim, w16.data(), vocab, targets.data(), scale, lse16.data(), dh16.data(), dw16.data());
  Buffer gh16 = up(h16), gw16 = up(w16), gdh16 = zeroed_array<float>(gpu(), n * dim),
         gdw16 = zeroed_array<float>(gpu(), vocab * dim);
  const CrossEntropyLoss got16 =
      gpu().cross_entropy_forward_backward(gh16.as<bf16>(), n, dim, gw16.as<bf16>(), vocab, gt.as<std::int32_t>(),
                                           scale, glse.as<float>(), gdh16.as<float>(), gdw16.as<float>());
  EXPECT_NEAR(got16.loss_sum, want16.loss_sum, 1e-3 * std::abs(want16.loss_sum));
  EXPECT_TRUE(all_close(down<float>(gdh16), dh16, 1e-4, 1e-2));
  EXPECT_TRUE(all_close(down<float>(gdw16), dw16, 1e-4, 1e-2));
}

TEST(CudaOps, AdamWWithClipAndBf16CopyMatchesTheCpuInterface) {
  HERD_REQUIRE_GPU();
  const std::int64_t n = 100000;
  AdamWConfig cfg;
  cfg.lr = 1e-2;
  const std::vector<float> p0 = random_vector(n, 12), g = random_vector(n, 13);
  std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
  std::vector<bf16> r(n);
  Buffer gp = up(p0), gg = up(g), gm = zeroed_array<float>(gpu(), n), gv = zeroed_array<float>(gpu(), n),
         gr = up(std::vector<bf16>(n));
  for (std::int64_t step = 1; step <= 3; ++step) {
    cpu().adamw_step(p.data(), g.data(), m.data(), v.data(), n, cfg, step, 0.25f, r.data());
    gpu().adamw_step(gp.as<float>(), gg.as<float>(), gm.as<float>(), gv.as<float>(), n, cfg, step, 0.25f,
                     gr.as<bf16>());
  }
  EXPECT_TRUE(all_close(down<float>(gp), p, 1e-6, 1e-5));
  EXPECT_TRUE(all_close(down<float>(gm), m, 1e-7, 1e-5));
  EXPECT_TRUE(all_close(widened(down<bf16>(gr)), widened(r), 1e-2, 1e-2));
  EXPECT_EQ(down<float>(gg), g) << "the gradients are left as they were";
  EXPECT_NEAR(gpu().sum_squares(gg.as<float>(), n), cpu().sum_squares(g.data(), n), 1e-6 * n);
}

}  // namespace
}  // namespace herd::kernels::cuda
