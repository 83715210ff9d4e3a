#include "herd/kernels/optim.h"

#include <gtest/gtest.h>

#include <cmath>
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

// One tensor's state on the host and on the device.
struct State {
  std::vector<float> p, g, m, v;
  DeviceBuffer<float> dp, dg, dm, dv;
};

State make_state(std::int64_t n, std::uint32_t seed) {
  State s;
  s.p = random_vector(n, seed);
  s.g = random_vector(n, seed + 1, -0.1f, 0.1f);
  s.m = random_vector(n, seed + 2, -0.01f, 0.01f);
  s.v = random_vector(n, seed + 3, 0.0f, 1e-4f);
  s.dp = upload(s.p);
  s.dg = upload(s.g);
  s.dm = upload(s.m);
  s.dv = upload(s.v);
  return s;
}

void expect_adamw_matches(const std::vector<std::int64_t>& sizes) {
  AdamWConfig cfg;
  cfg.lr = 1e-2;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weight_decay = 0.1;
  std::vector<State> states;
  std::vector<AdamWTensor> list;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    states.push_back(make_state(sizes[i], static_cast<std::uint32_t>(10 * i + 1)));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    State& s = states[i];
    list.push_back({s.dp.data(), s.dg.data(), s.dm.data(), s.dv.data(), sizes[i]});
  }
  for (std::int64_t step = 1; step <= 3; ++step) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      State& s = states[i];
      kernels::adamw_step(s.p.data(), s.g.data(), s.m.data(), s.v.data(), sizes[i], cfg, step);
    }
    adamw_step(list, cfg, step);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "tensor " << i << " of " << sizes[i] << " elements");
    const State& s = states[i];
    EXPECT_TRUE(all_close(download(s.dp), s.p, 1e-6, 1e-5));
    EXPECT_TRUE(all_close(download(s.dm), s.m, 1e-8, 1e-5));
    EXPECT_TRUE(all_close(download(s.dv), s.v, 1e-10, 1e-5));
    EXPECT_EQ(download(s.dg), s.g);  // grads are read only
  }
}

// Sizes around the 65536-element chunk, an empty tensor in the list, a one-element tensor.
TEST(CudaAdamW, MatchesTheCpuKernel) {
  HERD_REQUIRE_GPU();
  expect_adamw_matches({1, 1000, 65536, 65537, 0, 200000, 3});
}

// More tensors than one launch's argument block holds (64).
TEST(CudaAdamW, ManyTensors) {
  HERD_REQUIRE_GPU();
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int64_t> size(1, 5000);
  std::vector<std::int64_t> sizes(150);
  for (auto& n : sizes) n = size(rng);
  sizes[64] = 70000;
  expect_adamw_matches(sizes);
}

TEST(CudaAdamW, EdgeCases) {
  HERD_REQUIRE_GPU();
  adamw_step({}, AdamWConfig{}, 1);  // an empty list launches nothing
}

// Host-side contract checks abort (HERD_CHECK), as on the CPU; the threadsafe style re-runs the test
// binary rather than forking a process that holds a CUDA context.
TEST(CudaOptimDeathTest, ContractChecks) {
  HERD_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(adamw_step({}, AdamWConfig{}, 0), "AdamW step counts from 1");
  const float* none = nullptr;
  EXPECT_DEATH(sum_squares({none}, {}), "1 tensors but 0 sizes");
}

TEST(CudaSumSquares, MatchesTheCpuKernel) {
  HERD_REQUIRE_GPU();
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int64_t> size(0, 70000);
  std::vector<std::vector<float>> host;
  std::vector<DeviceBuffer<float>> device;
  std::vector<const float*> ptrs;
  std::vector<std::int64_t> sizes;
  double want = 0;
  for (int i = 0; i < 150; ++i) {  // three launches of up to 64 tensors
    const std::int64_t n = i == 3 ? 0 : (i == 4 ? 1 : size(rng));
    host.push_back(random_vector(n, 100 + i, -3.0f, 3.0f));
    device.push_back(upload(host.back()));
    ptrs.push_back(device.back().data());
    sizes.push_back(n);
    want += kernels::sum_squares(host.back().data(), n);
  }
  const double got = sum_squares(ptrs, sizes);
  EXPECT_NEAR(got, want, 1e-10 * want);  // fp64 sums in another order (fp32 would miss by ~1e-6)

  // One tensor of a few million elements: the grid-stride path over chunks.
  const std::vector<float> big = random_vector(5'000'003, 9);
  auto d_big = upload(big);
  const double want_big = kernels::sum_squares(big.data(), static_cast<std::int64_t>(big.size()));
  EXPECT_NEAR(sum_squares({d_big.data()}, {d_big.size()}), want_big, 1e-10 * want_big);
}

TEST(CudaSumSquares, EdgeCases) {
  HERD_REQUIRE_GPU();
  EXPECT_EQ(sum_squares({}, {}), 0.0);
  auto d = upload(std::vector<float>{3.0f});
  EXPECT_EQ(sum_squares({d.data(), d.data()}, {0, 0}), 0.0);
  EXPECT_EQ(sum_squares({d.data()}, {1}), 9.0);
}

TEST(CudaScaleBuffer, MatchesOneFp32MultiplyPerElement) {
  HERD_REQUIRE_GPU();
  std::vector<float> x = random_vector(100003, 11);
  auto d_x = upload(x);
  for (float& e : x) e *= 0.37f;
  scale_buffer(d_x.data(), d_x.size(), 0.37f);
  EXPECT_EQ(download(d_x), x);  // one multiply: exact
  scale_buffer(d_x.data(), 0, 0.0f);
  EXPECT_EQ(download(d_x), x);
}

}  // namespace
}  // namespace herd::kernels::cuda
