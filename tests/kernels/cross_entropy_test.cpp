// Vocab-tiled cross-entropy against the full-logits reference: several tilings (one vocab tile, many,
// ragged), ignored rows, the vocab-parallel pieces recombined across shards, and a finite-difference
// check of both gradients in double.
#include "herd/kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <thread>

#include "herd/kernels/reference.h"
#include "herd/kernels/scratch.h"
#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

using testing::random_vec;
using testing::rel_error;

struct CeProblem {
  std::int64_t n, dim, vocab;
  std::vector<std::int32_t> targets;
  CeProblem(std::int64_t n_, std::int64_t dim_, std::int64_t vocab_) : n(n_), dim(dim_), vocab(vocab_) {
    for (std::int64_t i = 0; i < n; ++i)
      targets.push_back(i % 5 == 3 ? kIgnoreIndex : static_cast<std::int32_t>((i * 7919) % vocab));
  }
};

template <typename T>
void expect_matches_reference(const CeProblem& p, const CrossEntropyTiles& tiles, double tol, bool fused) {
  auto h = random_vec<T>(p.n * p.dim, 1, -1, 1), w = random_vec<T>(p.vocab * p.dim, 2, -1, 1);
  std::vector<T> lse(p.n), dh(p.n * p.dim, T(0.25)), dw(p.vocab * p.dim, T(-0.5));
  std::vector<T> lse_ref(p.n), dh_ref = dh, dw_ref = dw;
  const double scale = 1.0 / 3.0;
  const CrossEntropyLoss r = ref::cross_entropy<T>(h.data(), p.n, p.dim, w.data(), p.vocab, p.targets.data(), scale,
                                                   lse_ref.data(), dh_ref.data(), dw_ref.data());
  CrossEntropyLoss l;
  if (fused) {
    l = cross_entropy_forward_backward<T>(h.data(), p.n, p.dim, w.data(), p.vocab, p.targets.data(), T(scale),
                                          lse.data(), dh.data(), dw.data(), tiles);
  } else {
    l = cross_entropy_forward<T>(h.data(), p.n, p.dim, w.data(), p.vocab, p.targets.data(), lse.data(), tiles);
    ce_shard_backward<T>(h.data(), p.n, p.dim, w.data(), 0, p.vocab, p.targets.data(), lse.data(), T(scale), dh.data(),
                         dw.data(), tiles);
  }
  EXPECT_EQ(l.count, r.count);
  EXPECT_NEAR(l.loss_sum, r.loss_sum, tol * std::abs(r.loss_sum));
  EXPECT_LT(rel_error(lse, lse_ref), tol);
  EXPECT_LT(rel_error(dh, dh_ref), tol);
  EXPECT_LT(rel_error(dw, dw_ref), tol);
}

TEST(CrossEntropy, MatchesReferenceAcrossTilings) {
  const CeProblem p(53, 24, 301);
  for (bool fused : {false, true}) {
    expect_matches_reference<float>(p, {16, 64}, 2e-5, fused);    // ragged row and vocab tiles
    expect_matches_reference<float>(p, {128, 512}, 2e-5, fused);  // one tile of everything
    expect_matches_reference<double>(p, {7, 100}, 1e-12, fused);
    expect_matches_reference<double>(p, {64, 301}, 1e-12, fused);  // vocab exactly one tile
  }
  // Tiles above the threshold of the OpenMP-parallel row loops.
  expect_matches_reference<float>(CeProblem(300, 16, 1000), {256, 1000}, 2e-5, true);
  expect_matches_reference<float>(CeProblem(300, 16, 1000), {256, 384}, 2e-5, false);
}

// Vocab parallelism: three uneven shards; stats combined across shards, gradients summed (dh) or
// concatenated (dw) must equal the single-shard result.
TEST(CrossEntropy, ShardedPiecesRecombine) {
  const CeProblem p(29, 12, 97);
  auto h = random_vec<double>(p.n * p.dim, 3), w = random_vec<double>(p.vocab * p.dim, 4);
  const std::int64_t bounds[4] = {0, 30, 31, 97};
  std::vector<double> mx(3 * p.n), se(3 * p.n), tl(3 * p.n), lse(p.n);
  for (int s = 0; s < 3; ++s)
    ce_shard_stats<double>(h.data(), p.n, p.dim, w.data() + bounds[s] * p.dim, bounds[s], bounds[s + 1] - bounds[s],
                           p.targets.data(), mx.data() + s * p.n, se.data() + s * p.n, tl.data() + s * p.n, {8, 16});
  const CrossEntropyLoss l =
      ce_combine_stats<double>(p.n, 3, mx.data(), se.data(), tl.data(), p.targets.data(), lse.data());
  std::vector<double> dh(p.n * p.dim, 0.0), dw(p.vocab * p.dim, 0.0);
  for (int s = 0; s < 3; ++s)
    ce_shard_backward<double>(h.data(), p.n, p.dim, w.data() + bounds[s] * p.dim, bounds[s], bounds[s + 1] - bounds[s],
                              p.targets.data(), lse.data(), 0.1, dh.data(), dw.data() + bounds[s] * p.dim, {8, 16});
  std::vector<double> lse_ref(p.n), dh_ref(dh.size(), 0.0), dw_ref(dw.size(), 0.0);
  const CrossEntropyLoss r = ref::cross_entropy<double>(h.data(), p.n, p.dim, w.data(), p.vocab, p.targets.data(), 0.1,
                                                        lse_ref.data(), dh_ref.data(), dw_ref.data());
  EXPECT_EQ(l.count, r.count);
  EXPECT_NEAR(l.loss_sum, r.loss_sum, 1e-12 * r.loss_sum);
  EXPECT_LT(rel_error(lse, lse_ref), 1e-12);
  EXPECT_LT(rel_error(dh, dh_ref), 1e-12);
  EXPECT_LT(rel_error(dw, dw_ref), 1e-12);
}

TEST(CrossEntropy, GradientsMatchFiniteDifferences) {
  const CeProblem p(9, 5, 23);
  auto h = random_vec<double>(p.n * p.dim, 5), w = random_vec<double>(p.vocab * p.dim, 6);
  std::vector<double> lse(p.n), dh(h.size(), 0.0), dw(w.size(), 0.0);
  const CrossEntropyTiles tiles{4, 10};
  const CrossEntropyLoss l0 = cross_entropy_forward_backward<double>(
      h.data(), p.n, p.dim, w.data(), p.vocab, p.targets.data(), 1.0, lse.data(), dh.data(), dw.data(), tiles);
  EXPECT_EQ(l0.count, 7);  // rows 3 and 8 are ignored
  auto loss = [&] {
    std::vector<double> l(p.n);
    return cross_entropy_forward<double>(h.data(), p.n, p.dim, w.data(), p.vocab, p.targets.data(), l.data(), tiles)
        .loss_sum;
  };
  EXPECT_LT(testing::fd_check(h, dh, loss, 45), 1e-6);
  EXPECT_LT(testing::fd_check(w, dw, loss, 45), 1e-6);
}

// The logits tile the kernels keep in the calling thread's scratch (kernels/scratch.h) is as large as
// the largest tile the call computes, not the default tile's 256 x 8,192: a vocab shard of 1,000 ids
// over 64 rows holds 64 x 1,000 floats, and the backward over the same rows and shard adds nothing. On
// a fresh thread, whose scratch starts empty.
TEST(CrossEntropy, TheScratchTileIsTheLargestTileTheCallComputes) {
  const std::int64_t n = 64, dim = 16, shard = 1000;
  std::int64_t after_stats = -1, after_backward = -1, at_start = -1;
  std::thread([&] {
    const std::vector<float> h = random_vec<float>(n * dim, 1), w = random_vec<float>(shard * dim, 2);
    std::vector<std::int32_t> targets(n);
    for (std::int64_t i = 0; i < n; ++i) targets[i] = static_cast<std::int32_t>(i * 7 % shard);
    std::vector<float> mx(n), se(n), tl(n), lse(n), dh(n * dim), dw(shard * dim);
    at_start = this_thread_scratch_bytes();
    ce_shard_stats<float>(h.data(), n, dim, w.data(), 0, shard, targets.data(), mx.data(), se.data(), tl.data());
    after_stats = this_thread_scratch_bytes();
    ce_combine_stats<float>(n, 1, mx.data(), se.data(), tl.data(), targets.data(), lse.data());
    ce_shard_backward<float>(h.data(), n, dim, w.data(), 0, shard, targets.data(), lse.data(), 1.0f, dh.data(),
                             dw.data());
    after_backward = this_thread_scratch_bytes();
  }).join();
  EXPECT_EQ(at_start, 0);
  EXPECT_EQ(after_stats, n * shard * static_cast<std::int64_t>(sizeof(float)));
  EXPECT_EQ(after_backward, after_stats);
}

}  // namespace
}  // namespace herd::kernels
