#include "herd/kernels/rope.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "herd/kernels/cuda/kernels.h"
#include "kernels/cuda/cuda_test_util.h"

namespace herd::kernels::cuda {
namespace {

using testing::all_close;
using testing::download;
using testing::random_vector;
using testing::upload;

RopeConfig llama_config(std::int64_t head_dim, RopeLayout layout) {
  RopeConfig cfg;
  cfg.head_dim = head_dim;
  cfg.theta = 500000.0;
  cfg.scaling_factor = 8.0;
  cfg.low_freq_factor = 1.0;
  cfg.high_freq_factor = 4.0;
  cfg.original_max_pos = 8192;
  cfg.layout = layout;
  return cfg;
}

std::vector<std::int32_t> random_positions(std::int64_t n, std::int64_t max_pos, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(max_pos - 1));
  std::vector<std::int32_t> pos(static_cast<std::size_t>(n));
  for (auto& p : pos) p = dist(rng);
  if (n > 1) {
    pos[0] = 0;
    pos[1] = static_cast<std::int32_t>(max_pos - 1);
  }
  return pos;
}

// The device table holds the host table's bits.
TEST(CudaRope, DeviceTableCopiesTheHostTable) {
  HERD_REQUIRE_GPU();
  const RopeTable<float> host(llama_config(128, RopeLayout::kHalf), 1000);
  const DeviceRopeTable table(host);
  EXPECT_EQ(table.max_pos(), 1000);
  EXPECT_EQ(table.config().head_dim, 128);
  const std::size_t count = 1000 * 64;
  std::vector<float> c(count), s(count);
  copy_to_host(c.data(), table.cos(), count * sizeof(float));
  copy_to_host(s.data(), table.sin(), count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(c[i], host.cos_row(0)[i]) << i;
    ASSERT_EQ(s[i], host.sin_row(0)[i]) << i;
  }
}

struct Case {
  RopeLayout layout;
  std::int64_t head_dim, heads, n, pad;  // token stride heads * head_dim + pad
};

const Case kCases[] = {
    {RopeLayout::kHalf, 64, 5, 37, 0},         {RopeLayout::kHalf, 128, 8, 20, 3},
    {RopeLayout::kInterleaved, 64, 5, 37, 0},  {RopeLayout::kInterleaved, 128, 8, 20, 3},
    {RopeLayout::kHalf, 128, 1, 300, 128 * 3}, {RopeLayout::kInterleaved, 6, 3, 11, 1},
};

TEST(CudaRope, ForwardAndBackwardMatchTheCpuKernel) {
  HERD_REQUIRE_GPU();
  std::uint32_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << (c.layout == RopeLayout::kHalf ? "half" : "interleaved") << " D " << c.head_dim
                                      << " heads " << c.heads << " n " << c.n << " pad " << c.pad);
    const std::int64_t max_pos = 4096;
    const RopeTable<float> host(llama_config(c.head_dim, c.layout), max_pos);
    const DeviceRopeTable table(host);
    const std::int64_t ld = c.heads * c.head_dim + c.pad;
    const std::vector<std::int32_t> pos = random_positions(c.n, max_pos, seed++);
    const std::vector<float> x0 = random_vector(c.n * ld, seed++, -2.0f, 2.0f);
    auto d_pos = upload(pos);

    std::vector<float> x = x0;
    auto d_x = upload(x0);
    kernels::rope_forward(host, pos.data(), c.n, c.heads, x.data(), ld);
    rope_forward(table, d_pos.data(), c.n, c.heads, d_x.data(), ld);
    const std::vector<float> got = download(d_x);
    EXPECT_TRUE(all_close(got, x, 1e-6, 1e-5));  // padding untouched on both sides

    // Backward on the rotated values: the CPU's inverse, and (nearly) the input back.
    kernels::rope_backward(host, pos.data(), c.n, c.heads, x.data(), ld);
    rope_backward(table, d_pos.data(), c.n, c.heads, d_x.data(), ld);
    const std::vector<float> back = download(d_x);
    EXPECT_TRUE(all_close(back, x, 1e-6, 1e-5));
    EXPECT_TRUE(all_close(back, x0, 1e-5, 1e-5));
  }
}

// n = 0 does nothing; a position outside the table leaves its token as it was (the CPU kernel throws).
TEST(CudaRope, EdgeCases) {
  HERD_REQUIRE_GPU();
  const RopeTable<float> host(llama_config(64, RopeLayout::kHalf), 16);
  const DeviceRopeTable table(host);
  const std::vector<float> x0 = random_vector(2 * 2 * 64, 9);
  auto d_x = upload(x0);
  auto d_pos = upload(std::vector<std::int32_t>{16, -1});
  rope_forward(table, d_pos.data(), 0, 2, d_x.data(), 128);
  rope_forward(table, d_pos.data(), 2, 2, d_x.data(), 128);
  rope_backward(table, d_pos.data(), 2, 2, d_x.data(), 128);
  EXPECT_EQ(download(d_x), x0);
}

}  // namespace
}  // namespace herd::kernels::cuda
