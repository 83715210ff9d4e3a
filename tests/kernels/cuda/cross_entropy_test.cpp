// The CUDA vocabulary-tiled cross-entropy (kernels/cuda/cross_entropy.cu) against the CPU kernels
// (kernels/cpu/cross_entropy.cpp) on random inputs: sharded statistics, their combination into lse and
// the loss, ignored targets, and the backward's dh / dw accumulation, in fp32 and bf16, over several
// row and vocab tiles (partial last tiles), with and without a caller workspace.
#include "herd/kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "herd/kernels/cuda/kernels.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

using testing::all_close;
using testing::download;
using testing::random_vector;
using testing::to_bf16_host;
using testing::upload;

// all_close with atol = rel * max|want| and rtol = rel (sums of many terms: the summation-order
// difference scales with the magnitudes summed, not with each result).
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double rel) {
  double scale = 0;
  for (const float w : want)
    if (std::isfinite(w)) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  return all_close(got, want, rel * scale, rel);
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

struct Case {
  std::int64_t n, dim, vocab;
  std::vector<std::int64_t> shard_begin;  // shard s covers [shard_begin[s], shard_begin[s + 1]), last to vocab
  CrossEntropyTiles tiles;
  std::vector<float> h, w;  // (n, dim), (vocab, dim)
  std::vector<std::int32_t> targets;
  std::int64_t shards() const { return static_cast<std::int64_t>(shard_begin.size()); }
  std::int64_t begin(std::int64_t s) const { return shard_begin[static_cast<std::size_t>(s)]; }
  std::int64_t size(std::int64_t s) const { return (s + 1 < shards() ? begin(s + 1) : vocab) - begin(s); }
};

// Every 7th target ignored, the rest uniform over the vocab.
Case make_case(std::int64_t n, std::int64_t dim, std::int64_t vocab, std::vector<std::int64_t> shard_begin,
               CrossEntropyTiles tiles, std::uint32_t seed) {
  Case c{n,
         dim,
         vocab,
         std::move(shard_begin),
         tiles,
         random_vector(n * dim, seed),
         random_vector(vocab * dim, seed + 1, -0.5f, 0.5f),
         {}};
  std::mt19937 rng(seed + 2);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(vocab - 1));
  for (std::int64_t i = 0; i < n; ++i) c.targets.push_back(i % 7 == 3 ? kIgnoreIndex : pick(rng));
  return c;
}

struct Stats {
  std::vector<float> row_max, row_sumexp, target_logit;  // shard-major (shards, n)
  explicit Stats(std::int64_t count)
      : row_max(static_cast<std::size_t>(count)),
        row_sumexp(static_cast<std::size_t>(count)),
        target_logit(static_cast<std::size_t>(count)) {}
};

// The full sharded forward and backward on the CPU and the GPU, compared. In = float or bf16 (h and w
// rounded to bf16 first, so both sides see the same values).
template <typename In>
void check(const Case& c, double stats_rel, double grad_rel) {
  constexpr bool kBf16 = std::is_same_v<In, bf16>;
  const std::vector<float> h = kBf16 ? rounded(c.h) : c.h;
  const std::vector<float> w = kBf16 ? rounded(c.w) : c.w;
  const std::vector<bf16> h16 = to_bf16_host(h), w16 = to_bf16_host(w);
  const std::int64_t n = c.n, dim = c.dim, shards = c.shards();

  // CPU.
  Stats cpu(shards * n);
  for (std::int64_t s = 0; s < shards; ++s) {
    const std::int64_t off = s * n;
    if constexpr (kBf16) {
      kernels::ce_shard_stats(h16.data(), n, dim, w16.data() + c.begin(s) * dim, c.begin(s), c.size(s),
                              c.targets.data(), cpu.row_max.data() + off, cpu.row_sumexp.data() + off,
                              cpu.target_logit.data() + off, c.tiles);
    } else {
      kernels::ce_shard_stats<float>(h.data(), n, dim, w.data() + c.begin(s) * dim, c.begin(s), c.size(s),
                                     c.targets.data(), cpu.row_max.data() + off, cpu.row_sumexp.data() + off,
                                     cpu.target_logit.data() + off, c.tiles);
    }
  }
  std::vector<float> lse_cpu(static_cast<std::size_t>(n));
  const CrossEntropyLoss loss_cpu = kernels::ce_combine_stats<float>(
      n, shards, cpu.row_max.data(), cpu.row_sumexp.data(), cpu.target_logit.data(), c.targets.data(), lse_cpu.data());
  ASSERT_GT(loss_cpu.count, 0);
  const float scale = 1.0f / static_cast<float>(loss_cpu.count);
  // dh and dw start from random values of the gradients' own order (a few 1e-3 here): the backward
  // accumulates into them, and an overwrite would miss by that much.
  const std::vector<float> dh0 = random_vector(n * dim, 91, -1e-3f, 1e-3f);
  const std::vector<float> dw0 = random_vector(c.vocab * dim, 92, -1e-3f, 1e-3f);
  std::vector<float> dh_cpu = dh0, dw_cpu = dw0;
  for (std::int64_t s = 0; s < shards; ++s) {
    if constexpr (kBf16) {
      kernels::ce_shard_backward(h16.data(), n, dim, w16.data() + c.begin(s) * dim, c.begin(s), c.size(s),
                                 c.targets.data(), lse_cpu.data(), scale, dh_cpu.data(),
                                 dw_cpu.data() + c.begin(s) * dim, c.tiles);
    } else {
      kernels::ce_shard_backward<float>(h.data(), n, dim, w.data() + c.begin(s) * dim, c.begin(s), c.size(s),
                                        c.targets.data(), lse_cpu.data(), scale, dh_cpu.data(),
                                        dw_cpu.data() + c.begin(s) * dim, c.tiles);
    }
  }

  // GPU: the first shard gets a caller workspace, the others allocate their own.
  auto targets = upload(c.targets);
  auto hd = upload(h), wd = upload(w);
  auto hd16 = upload(h16), wd16 = upload(w16);
  DeviceBuffer<float> row_max(shards * n), row_sumexp(shards * n), target_logit(shards * n);
  DeviceBuffer<float> workspace(cross_entropy_workspace(c.tiles));
  for (std::int64_t s = 0; s < shards; ++s) {
    const std::int64_t off = s * n;
    float* ws = s == 0 ? workspace.data() : nullptr;
    if constexpr (kBf16) {
      cuda::ce_shard_stats(hd16.data(), n, dim, wd16.data() + c.begin(s) * dim, c.begin(s), c.size(s), targets.data(),
                           row_max.data() + off, row_sumexp.data() + off, target_logit.data() + off, c.tiles, ws);
    } else {
      cuda::ce_shard_stats(hd.data(), n, dim, wd.data() + c.begin(s) * dim, c.begin(s), c.size(s), targets.data(),
                           row_max.data() + off, row_sumexp.data() + off, target_logit.data() + off, c.tiles, ws);
    }
  }
  EXPECT_TRUE(close(download(row_max), cpu.row_max, stats_rel)) << "row_max";
  EXPECT_TRUE(close(download(row_sumexp), cpu.row_sumexp, stats_rel)) << "row_sumexp";
  EXPECT_TRUE(close(download(target_logit), cpu.target_logit, stats_rel)) << "target_logit";

  DeviceBuffer<float> lse(n);
  const CrossEntropyLoss loss = cuda::ce_combine_stats(n, shards, row_max.data(), row_sumexp.data(),
                                                       target_logit.data(), targets.data(), lse.data());
  EXPECT_EQ(loss.count, loss_cpu.count);
  EXPECT_NEAR(loss.loss_sum, loss_cpu.loss_sum, stats_rel * std::fabs(loss_cpu.loss_sum));
  EXPECT_TRUE(close(download(lse), lse_cpu, stats_rel)) << "lse";

  // The backward gets the CPU's lse, so both sides differentiate the same statistics.
  auto lse_in = upload(lse_cpu);
  auto dh = upload(dh0), dw = upload(dw0);
  for (std::int64_t s = 0; s < shards; ++s) {
    float* ws = s == 0 ? workspace.data() : nullptr;
    if constexpr (kBf16) {
      cuda::ce_shard_backward(hd16.data(), n, dim, wd16.data() + c.begin(s) * dim, c.begin(s), c.size(s),
                              targets.data(), lse_in.data(), scale, dh.data(), dw.data() + c.begin(s) * dim, c.tiles,
                              ws);
    } else {
      cuda::ce_shard_backward(hd.data(), n, dim, wd.data() + c.begin(s) * dim, c.begin(s), c.size(s), targets.data(),
                              lse_in.data(), scale, dh.data(), dw.data() + c.begin(s) * dim, c.tiles, ws);
    }
  }
  // Compare the accumulated parts (the random starting values subtracted), at the gradients' scale.
  std::vector<float> gdh = download(dh), gdw = download(dw);
  for (std::size_t i = 0; i < gdh.size(); ++i) {
    gdh[i] -= dh0[i];
    dh_cpu[i] -= dh0[i];
  }
  for (std::size_t i = 0; i < gdw.size(); ++i) {
    gdw[i] -= dw0[i];
    dw_cpu[i] -= dw0[i];
  }
  EXPECT_TRUE(close(gdh, dh_cpu, grad_rel)) << "dh";
  EXPECT_TRUE(close(gdw, dw_cpu, grad_rel)) << "dw";
}

// fp32: both sides are fp32 GEMMs (no TF32) and fp32 statistics; they differ by summation order and
// exp (expf vs the CPU's polynomial, a few ulp): 1e-4 relative to the largest magnitude, for the
// statistics and for the gradients (compared after subtracting their starting values, which are of
// the gradients' own size, so the subtraction costs nothing measurable).
TEST(CudaCrossEntropy, ShardedStatsCombineAndBackwardFp32) {
  HERD_REQUIRE_GPU();
  const Case c = make_case(300, 64, 1000, {0, 400, 750}, {128, 256}, 31);
  check<float>(c, 1e-4, 1e-4);
}

TEST(CudaCrossEntropy, OneShardDefaultTilesFp32) {
  HERD_REQUIRE_GPU();
  const Case c = make_case(70, 32, 500, {0}, {}, 32);
  check<float>(c, 1e-4, 1e-4);
}

// bf16: h and w are the same bf16 values on both sides and the logits GEMMs accumulate in fp32, so the
// statistics are as close as fp32 (2e-4 for the longer fp32 sums of widened products). The backward
// rounds G to bf16 on both sides; the fp32 G values differ by ~1e-6 relative, which moves a rounding
// by one bf16 ulp (2^-8 relative) for a small fraction of elements, each shifting dh / dw by up to
// 2^-8 of one |G w| term: 1e-2 of the gradients' scale.
TEST(CudaCrossEntropy, ShardedStatsCombineAndBackwardBf16) {
  HERD_REQUIRE_GPU();
  const Case c = make_case(300, 64, 1000, {0, 400, 750}, {128, 256}, 33);
  check<bf16>(c, 2e-4, 1e-2);
}

TEST(CudaCrossEntropy, OneShardDefaultTilesBf16) {
  HERD_REQUIRE_GPU();
  const Case c = make_case(70, 32, 500, {0}, {}, 34);
  check<bf16>(c, 2e-4, 1e-2);
}

}  // namespace
}  // namespace herd::kernels::cuda
