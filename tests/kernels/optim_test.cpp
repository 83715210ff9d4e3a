// AdamW against a direct transcription of the update (several steps, weight decay, bias correction),
// and the clipping pieces (sum of squares, scale, coefficient).
#include "herd/kernels/optim.h"

#include <gtest/gtest.h>

#include "herd/kernels/convert.h"
#include "herd/kernels/reference.h"
#include "kernels/test_util.h"

namespace herd::kernels {
namespace {

using testing::random_vec;
using testing::rel_error;

template <typename T>
void adamw_case(std::int64_t n, double tol) {
  const AdamWConfig cfg{1e-2, 0.9, 0.95, 1e-8, 0.1};
  auto p = random_vec<T>(n, 1), p_ref = p;
  std::vector<T> m(n, T(0)), v(n, T(0)), m_ref(n, T(0)), v_ref(n, T(0));
  for (std::int64_t step = 1; step <= 5; ++step) {
    auto g = random_vec<T>(n, 10 + static_cast<std::uint32_t>(step));
    adamw_step<T>(p.data(), g.data(), m.data(), v.data(), n, cfg, step);
    ref::adamw_step<T>(p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, cfg, step);
  }
  EXPECT_LT(rel_error(p, p_ref), tol);
  EXPECT_LT(rel_error(m, m_ref), tol);
  EXPECT_LT(rel_error(v, v_ref), tol);
}

TEST(AdamW, MatchesReference) {
  adamw_case<float>(1001, 1e-6);
  adamw_case<float>(200000, 1e-6);  // threaded path
  adamw_case<double>(1001, 1e-13);
}

TEST(AdamW, FirstStepMovesByLearningRateTimesSign) {
  // With bias correction, step 1 gives m_hat = g and v_hat = g^2: the update is lr * sign(g).
  std::vector<double> p = {1.0, -2.0}, g = {0.3, -5.0}, m(2, 0.0), v(2, 0.0);
  adamw_step<double>(p.data(), g.data(), m.data(), v.data(), 2, {0.1, 0.9, 0.999, 0.0, 0.0}, 1);
  EXPECT_NEAR(p[0], 0.9, 1e-12);
  EXPECT_NEAR(p[1], -1.9, 1e-12);
}

// The fused form the trainer runs: the clip applied as each gradient is read and the new weights
// rounded into a bf16 copy as they are written, bit for bit the gradients scaled first, the step and to_bf16()
// (and the gradients left as they were), on both the one-thread and the threaded loop; a scale of 1
// and no copy is the plain step.
TEST(AdamW, ClipAndBf16CopyFusedAreTheSeparatePassesBitForBit) {
  const AdamWConfig cfg{1e-2, 0.9, 0.95, 1e-8, 0.1};
  for (std::int64_t n : {1001, 200000}) {
    SCOPED_TRACE(n);
    auto p = random_vec<float>(n, 1), p_ref = p;
    std::vector<float> m(n, 0.0f), v(n, 0.0f), m_ref(n, 0.0f), v_ref(n, 0.0f);
    std::vector<bf16> h(n), h_ref(n);
    for (std::int64_t step = 1; step <= 3; ++step) {
      const auto g = random_vec<float>(n, 20 + static_cast<std::uint32_t>(step));
      const float clip = step == 2 ? 1.0f : 0.37f;
      auto g_ref = g;
      for (float& x : g_ref) x *= clip;
      adamw_step<float>(p_ref.data(), g_ref.data(), m_ref.data(), v_ref.data(), n, cfg, step);
      to_bf16(p_ref.data(), n, h_ref.data());
      auto g_fused = g;
      adamw_step<float>(p.data(), g_fused.data(), m.data(), v.data(), n, cfg, step, clip, h.data());
      ASSERT_EQ(g_fused, g) << "the gradients were written";
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(p[i], p_ref[i]) << "step " << step << ", element " << i;
        ASSERT_EQ(m[i], m_ref[i]) << "step " << step << ", element " << i;
        ASSERT_EQ(v[i], v_ref[i]) << "step " << step << ", element " << i;
        ASSERT_EQ(h[i].bits, h_ref[i].bits) << "step " << step << ", element " << i;
      }
    }
    auto q = p, q_ref = p;
    const auto g = random_vec<float>(n, 30);
    adamw_step<float>(q.data(), g.data(), m.data(), v.data(), n, cfg, 4, 1.0f, nullptr);
    adamw_step<float>(q_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, cfg, 4);
    EXPECT_EQ(q, q_ref);
  }
}

TEST(Clip, SumSquaresAndCoefficient) {
  auto x = random_vec<float>(100003, 3);
  double expect = 0;
  for (float e : x) expect += double(e) * e;
  EXPECT_NEAR(sum_squares<float>(x.data(), 100003), expect, 1e-9 * expect);
  const double norm = std::sqrt(expect);
  const double c = clip_coefficient(norm, 1.0);
  EXPECT_NEAR(c, 1.0 / (norm + 1e-6), 1e-15);
  for (float& e : x) e *= static_cast<float>(c);
  EXPECT_NEAR(std::sqrt(sum_squares<float>(x.data(), 100003)), 1.0, 1e-5);
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
}

}  // namespace
}  // namespace herd::kernels
