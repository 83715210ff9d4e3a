// Simulator tests: the textbook bubble formulas with uniform costs, a hand-timed example with latency
// and synchronous sends, agreement with a naive fixed-point reference simulator on random costs, the
// critical-path bound for M < PP, and the lighter-ends balancing effect.
#include "herd/schedule/simulate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "schedule/spec_of.h"

namespace herd::schedule {
namespace {

using testing::spec_of;

SimResult run(const ScheduleSpec& spec, const CostModel* cost = nullptr) {
  Result<Schedule> s = generate(spec);
  HERD_CHECK(s.ok(), s.error().message());
  Result<SimResult> r = simulate(*s, cost ? *cost : CostModel::uniform(s->spec));
  HERD_CHECK(r.ok(), r.error().message());
  return *r;
}

TEST(Simulate, TextbookBubbleForGPipeAnd1F1B) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = pp; m <= 24; m += 3) {
      for (ScheduleKind k : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
        const SimResult r = run(spec_of(k, pp, 1, m, 1));
        EXPECT_NEAR(r.bubble_ratio, double(pp - 1) / m, 1e-12) << schedule_kind_name(k) << " pp=" << pp << " m=" << m;
        EXPECT_NEAR(r.step_time, 3.0 * (m + pp - 1), 1e-9);
        EXPECT_NEAR(r.bubble_fraction, double(pp - 1) / (m + pp - 1), 1e-12);
      }
    }
  }
}

// (PP-1)/(V*M) holds exactly whenever every group of N micro-batches has at least PP of them: N >= PP
// and M mod N is 0 or at least PP. That covers Megatron's interleaving (N = PP, M a multiple of PP),
// breadth-first (N = M >= PP) and Llama 3's Figure 6 (PP 4, M 10, N 5), also M not a multiple of PP.
TEST(Simulate, TextbookBubbleForInterleavedFamily) {
  int cases = 0;
  for (int pp = 1; pp <= 8; ++pp) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = pp; m <= 20; ++m) {
        for (int n = pp; n <= m; ++n) {
          if (m % n != 0 && m % n < pp) continue;
          const SimResult r = run(spec_of(ScheduleKind::kFlexible, pp, v, m, n));
          EXPECT_NEAR(r.bubble_ratio, double(pp - 1) / (v * m), 1e-12)
              << "pp=" << pp << " v=" << v << " m=" << m << " n=" << n;
          ++cases;
        }
        if (m % pp == 0) {
          const SimResult r = run(spec_of(ScheduleKind::kInterleaved, pp, v, m, 0));
          EXPECT_NEAR(r.bubble_ratio, double(pp - 1) / (v * m), 1e-12) << "interleaved pp=" << pp << " v=" << v;
        }
      }
    }
  }
  EXPECT_GT(cases, 500);
}

// Small M: the step is one micro-batch's round trip through all PP*V stages (3*V*PP) plus M-1 more
// forward-backward pairs, the interleaved analogue of 1F1B's (M + PP - 1) * (f + b); the bubble ratio
// is then (V*(PP-M) + M-1) / (V*M), above the M >= PP formula.
TEST(Simulate, FewerMicrobatchesThanRanks) {
  for (int pp : {4, 8}) {
    for (int v : {1, 2, 4}) {
      for (int m = 1; m < pp; ++m) {
        const SimResult r = run(spec_of(ScheduleKind::kFlexible, pp, v, m, m));
        EXPECT_NEAR(r.step_time, 3.0 * v * pp + 3.0 * (m - 1), 1e-9) << "pp=" << pp << " v=" << v << " m=" << m;
        EXPECT_GT(r.bubble_ratio, double(pp - 1) / (v * m) - 1e-12);
      }
    }
  }
}

TEST(Simulate, HandTimedLatencyAndSyncSends) {
  // GPipe, 2 ranks, 2 micro-batches, forward 1, backward 2, each transfer 0.5.
  CostModel c = CostModel::uniform(spec_of(ScheduleKind::kGPipe, 2, 1, 2, 1));
  c.p2p_latency = 0.5;
  const ScheduleSpec spec = spec_of(ScheduleKind::kGPipe, 2, 1, 2, 1);
  // Async: rank 0 F0 [0,1] F1 [1,2]; rank 1 F0 [1.5,2.5] F1 [2.5,3.5] B0 [3.5,5.5] B1 [5.5,7.5];
  // rank 0 B0 [6,8] B1 [8,10].
  SimResult a = run(spec, &c);
  EXPECT_DOUBLE_EQ(a.step_time, 10.0);
  ASSERT_EQ(a.timeline[0].size(), 4u);
  EXPECT_DOUBLE_EQ(a.timeline[0][1].start, 1.0);
  EXPECT_DOUBLE_EQ(a.timeline[1][0].start, 1.5);
  EXPECT_DOUBLE_EQ(a.timeline[0][2].start, 6.0);
  // Sync: rank 0 F1 starts at 1.5 and arrives at 3.0; rank 1 F1 [3,4] B0 [4,6], send 0.5 -> B1 [6.5,8.5]
  // (its gradient arrives at 9); rank 0 B0 at 6.5, ends 8.5, B1 [9,11].
  c.async_send = false;
  SimResult s = run(spec, &c);
  EXPECT_DOUBLE_EQ(s.timeline[0][1].start, 1.5);
  EXPECT_DOUBLE_EQ(s.timeline[1][2].start, 4.0);
  EXPECT_DOUBLE_EQ(s.timeline[1][3].start, 6.5);
  EXPECT_DOUBLE_EQ(s.step_time, 11.0);
  EXPECT_DOUBLE_EQ(s.busy[0], 6.0);
  EXPECT_DOUBLE_EQ(s.idle[0], 5.0);
}

// A reference simulator written for clarity: sweep every action of every rank in turn, settling an
// action once its predecessor on the rank and (for a receive) its send are settled, until nothing
// changes. Quadratic, but independent of the fast one's work stack and indexing.
std::vector<std::vector<double>> reference_end_times(const Schedule& s, const CostModel& c) {
  const int pp = s.spec.pp;
  std::vector<std::vector<double>> end(pp), send_arrival(pp);
  for (int r = 0; r < pp; ++r) {
    end[r].assign(s.ranks[r].size(), -1);
    send_arrival[r].assign(s.ranks[r].size(), -1);
  }
  auto find_send = [&](const Action& recv, int& rank, int& idx) {
    const bool grad = recv.type == ActionType::kRecvGrad;
    const ActionType want = grad ? ActionType::kSendGrad : ActionType::kSendActivation;
    const int stage = grad ? recv.stage + 1 : recv.stage - 1;
    rank = Schedule::rank_of_stage(s.spec, stage);
    for (idx = 0; idx < static_cast<int>(s.ranks[rank].size()); ++idx) {
      const Action& a = s.ranks[rank][idx];
      if (a.type == want && a.microbatch == recv.microbatch && a.stage == stage) return;
    }
    HERD_CHECK(false, "no send");
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < pp; ++r) {
      for (std::size_t i = 0; i < s.ranks[r].size(); ++i) {
        if (end[r][i] >= 0) continue;
        if (i > 0 && end[r][i - 1] < 0) break;
        const double t0 = i > 0 ? end[r][i - 1] : 0.0;
        const Action& a = s.ranks[r][i];
        switch (a.type) {
          case ActionType::kForward: end[r][i] = t0 + c.forward[a.stage]; break;
          case ActionType::kBackward: end[r][i] = t0 + c.backward[a.stage]; break;
          case ActionType::kSendActivation:
          case ActionType::kSendGrad: {
            const int b = a.type == ActionType::kSendGrad ? a.stage - 1 : a.stage;
            const double d = c.p2p_latency + c.boundary_bytes[b] * c.p2p_per_byte;
            send_arrival[r][i] = t0 + d;
            end[r][i] = c.async_send ? t0 : t0 + d;
            break;
          }
          default: {
            int sr = 0, si = 0;
            find_send(a, sr, si);
            if (end[sr][si] < 0) goto next_rank;
            end[r][i] = std::max(t0, send_arrival[sr][si]);
          }
        }
        changed = true;
      }
    next_rank:;
    }
  }
  return end;
}

TEST(Simulate, AgreesWithReferenceOnRandomCosts) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.2, 3.0);
  for (int trial = 0; trial < 60; ++trial) {
    const int pp = 1 + trial % 5, v = 1 + (trial / 5) % 3, m = 1 + (trial * 7) % 11;
    const int n = 1 + (trial * 3) % m;
    Result<Schedule> s = generate(spec_of(ScheduleKind::kFlexible, pp, v, m, n));
    ASSERT_TRUE(s.ok());
    CostModel c = CostModel::uniform(s->spec);
    for (double& x : c.forward) x = u(rng);
    for (double& x : c.backward) x = u(rng);
    for (double& x : c.boundary_bytes) x = u(rng);
    c.p2p_latency = u(rng) * 0.3;
    c.p2p_per_byte = 0.1;
    c.async_send = trial % 2 == 0;
    Result<SimResult> r = simulate(*s, c);
    ASSERT_TRUE(r.ok()) << r.error().message();
    const auto ref = reference_end_times(*s, c);
    double step = 0;
    for (int rank = 0; rank < pp; ++rank) {
      step = std::max(step, ref[rank].empty() ? 0.0 : ref[rank].back());
      for (const Interval& iv : r->timeline[rank]) EXPECT_NEAR(iv.end, ref[rank][iv.action], 1e-9);
    }
    EXPECT_NEAR(r->step_time, step, 1e-9) << "trial " << trial;
  }
}

TEST(Simulate, PeakMemoryMatchesChecker) {
  for (int n : {2, 4, 8, 16}) {
    const ScheduleSpec spec = spec_of(ScheduleKind::kFlexible, 4, 2, 16, n);
    Result<Schedule> s = generate(spec);
    ASSERT_TRUE(s.ok());
    const CheckResult c = *check(*s);
    CostModel cost = CostModel::uniform(spec);
    for (std::size_t i = 0; i < cost.activation_bytes.size(); ++i) cost.activation_bytes[i] = 10.0;
    const SimResult r = *simulate(*s, cost);
    EXPECT_EQ(r.peak_inflight, c.peak_inflight);
    for (int rank = 0; rank < 4; ++rank) EXPECT_DOUBLE_EQ(r.peak_activation_bytes[rank], 10.0 * c.peak_inflight[rank]);
  }
}

TEST(Simulate, LighterEndsBalanceTheOutputLayer) {
  // 30 layers over PP 4 x V 2: lighter ends give 3,4,...,4,3 and every stage costs 4 units with the
  // output (1 unit) on the last; the even split gives 4,4,4,4,4,4,3,3 and the last stage costs 4 + 1.
  const ScheduleSpec spec = spec_of(ScheduleKind::kFlexible, 4, 2, 8, 4);
  LayerCosts lc;
  lc.output_forward = 1.0;
  const CostModel light = CostModel::from_layers(*assign_layers(30, 4, 2, true), lc);
  const CostModel even = CostModel::from_layers(*assign_layers(30, 4, 2, false), lc);
  EXPECT_EQ(light.forward, std::vector<double>({3, 4, 4, 4, 4, 4, 4, 4}));
  const SimResult a = run(spec, &light), b = run(spec, &even);
  EXPECT_LT(a.step_time, b.step_time);
  // Were the embedding as heavy as a layer, every stage would cost 4 and the step would be the
  // textbook (M*V + PP - 1) * (4 + 8); the lighter first stage only helps.
  lc.embedding_forward = 1.0;
  const CostModel heavy_embedding = CostModel::from_layers(*assign_layers(30, 4, 2, true), lc);
  const SimResult full = run(spec, &heavy_embedding);
  EXPECT_NEAR(full.step_time, (8 * 2 + 3) * 12.0, 1e-9);
  EXPECT_LE(a.step_time, full.step_time);
}

TEST(Simulate, RejectsMismatchedCostsAndDeadlocks) {
  Result<Schedule> s = generate(spec_of(ScheduleKind::kFlexible, 2, 2, 4, 2));
  ASSERT_TRUE(s.ok());
  CostModel c = CostModel::uniform(s->spec);
  c.forward.pop_back();
  EXPECT_FALSE(simulate(*s, c).ok());
  Schedule broken = *s;
  auto& l = broken.ranks[0];
  l.erase(std::find_if(l.begin(), l.end(), [](const Action& a) { return a.type == ActionType::kSendActivation; }));
  Result<SimResult> r = simulate(broken, CostModel::uniform(s->spec));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("deadlock"), std::string::npos);
}

}  // namespace
}  // namespace herd::schedule
