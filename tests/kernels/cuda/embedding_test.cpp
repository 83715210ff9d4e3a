#include "herd/kernels/embedding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "herd/core/bf16.h"
#include "herd/kernels/cuda/kernels.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

using testing::all_close;
using testing::download;
using testing::random_vector;
using testing::to_bf16_host;
using testing::upload;

// This rank's shard holds rows [100, 150) of a 300-token vocabulary.
constexpr std::int64_t kVocab = 300, kBegin = 100, kRows = 50;

std::vector<std::int32_t> random_ids(std::int64_t n, std::int32_t lo, std::int32_t hi, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(lo, hi - 1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) id = dist(rng);
  // The shard's edges, on both sides.
  const std::int32_t edges[] = {static_cast<std::int32_t>(kBegin - 1), static_cast<std::int32_t>(kBegin),
                                static_cast<std::int32_t>(kBegin + kRows - 1),
                                static_cast<std::int32_t>(kBegin + kRows)};
  for (std::size_t i = 0; i < 4 && i < ids.size(); ++i) ids[i] = edges[i];
  return ids;
}

TEST(CudaEmbedding, ForwardMatchesTheCpuKernel) {
  HERD_REQUIRE_GPU();
  for (const std::int64_t dim : {1, 72, 4096}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    const std::int64_t n = 97;
    const std::vector<std::int32_t> ids = random_ids(n, 0, kVocab, 1);
    const std::vector<float> table = random_vector(kRows * dim, 2);
    const std::vector<bf16> table16 = to_bf16_host(random_vector(kRows * dim, 3));
    auto d_ids = upload(ids);
    auto d_table = upload(table);
    auto d_table16 = upload(table16);

    std::vector<float> want = random_vector(n * dim, 4);  // overwritten, zero rows included
    auto d_out = upload(want);
    kernels::embedding_forward(ids.data(), n, table.data(), kBegin, kRows, dim, want.data());
    embedding_forward(d_ids.data(), n, d_table.data(), kBegin, kRows, dim, d_out.data());
    EXPECT_EQ(download(d_out), want);  // a copy: exact

    want = random_vector(n * dim, 5);
    d_out = upload(want);
    kernels::embedding_forward(ids.data(), n, table16.data(), kBegin, kRows, dim, want.data());
    embedding_forward(d_ids.data(), n, d_table16.data(), kBegin, kRows, dim, d_out.data());
    EXPECT_EQ(download(d_out), want);  // widening is exact
  }
}

TEST(CudaEmbedding, BackwardMatchesTheCpuKernel) {
  HERD_REQUIRE_GPU();
  for (const std::int64_t dim : {1, 72, 4096}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    const std::int64_t n = 500;
    // Mostly in the shard, with many repeats (the atomics' case), and some outside it.
    const std::vector<std::int32_t> ids = random_ids(n, 90, 160, 6);
    const std::vector<float> dout = random_vector(n * dim, 7);
    std::vector<float> dtable = random_vector(kRows * dim, 8);  // accumulates
    auto d_ids = upload(ids);
    auto d_dout = upload(dout);
    auto d_dtable = upload(dtable);
    kernels::embedding_backward(ids.data(), n, dout.data(), kBegin, kRows, dim, dtable.data());
    embedding_backward(d_ids.data(), n, d_dout.data(), kBegin, kRows, dim, d_dtable.data());
    EXPECT_TRUE(all_close(download(d_dtable), dtable, 1e-5, 1e-5));
  }
}

// No tokens, or none in the shard: nothing changes.
TEST(CudaEmbedding, EmptyAndOutOfShard) {
  HERD_REQUIRE_GPU();
  const std::int64_t dim = 16;
  const std::vector<float> dtable = random_vector(kRows * dim, 9);
  auto d_dtable = upload(dtable);
  const std::vector<std::int32_t> outside = {0, 99, 150, 299};
  auto d_ids = upload(outside);
  auto d_dout = upload(random_vector(4 * dim, 10));
  embedding_backward(d_ids.data(), 0, d_dout.data(), kBegin, kRows, dim, d_dtable.data());
  embedding_backward(d_ids.data(), 4, d_dout.data(), kBegin, kRows, dim, d_dtable.data());
  EXPECT_EQ(download(d_dtable), dtable);

  auto d_out = upload(random_vector(4 * dim, 11));
  embedding_forward(d_ids.data(), 4, d_dtable.data(), kBegin, kRows, dim, d_out.data());
  EXPECT_EQ(download(d_out), std::vector<float>(4 * dim, 0.0f));
}

}  // namespace
}  // namespace herd::kernels::cuda
