// Generator and checker tests: every schedule kind is complete and deadlock-free over a broad grid of
// (PP, V, M, N), also M < PP and M not a multiple of N; the classic interleaved order matches
// Megatron's interleaved 1F1B; the checker catches deliberately broken schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "herd/schedule/schedule.h"
#include "schedule/spec_of.h"

namespace herd::schedule {
namespace {

using testing::spec_of;

// "F3.1": forward of micro-batch 3 on chunk 1. Built with appends: GCC 12 misreports -Wrestrict on
// chains of std::string operator+ at -O3.
std::string token(bool forward, int mb, int chunk) {
  std::string t(forward ? "F" : "B");
  t.append(std::to_string(mb)).append(".").append(std::to_string(chunk));
  return t;
}

// Compute actions of one rank as compact tokens, e.g. "F0.1" = forward of micro-batch 0, chunk 1.
std::vector<std::string> compute_tokens(const Schedule& s, int rank) {
  std::vector<std::string> out;
  for (const Action& a : s.ranks[rank]) {
    if (a.type != ActionType::kForward && a.type != ActionType::kBackward) continue;
    out.push_back(token(a.type == ActionType::kForward, a.microbatch, a.stage / s.spec.pp));
  }
  return out;
}

TEST(Generate, FlexibleIsDeadlockFreeOverBroadGrid) {
  int cases = 0;
  for (int pp = 1; pp <= 8; ++pp) {
    for (int v = 1; v <= 4; ++v) {
      for (int m = 1; m <= 20; ++m) {
        for (int n = 1; n <= m; ++n) {
          // Every N for small M; for larger M the interesting N: 1, PP-1..PP+1, divisors' neighbours, M.
          if (m > 8 && !(n <= 2 || std::abs(n - pp) <= 1 || n == m || n == m - 1 || m % n == 1)) continue;
          const ScheduleSpec spec = spec_of(ScheduleKind::kFlexible, pp, v, m, n);
          Result<Schedule> s = generate(spec);
          ASSERT_TRUE(s.ok()) << s.error().message();
          Result<CheckResult> c = check(*s);
          ASSERT_TRUE(c.ok()) << "pp=" << pp << " v=" << v << " m=" << m << " n=" << n << ": " << c.error().message();
          for (int r = 0; r < pp; ++r) {
            EXPECT_GE(c->peak_inflight[r], 1);
            EXPECT_LE(c->peak_inflight[r], m * v);
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 2000);
}

TEST(Generate, OtherKindsAreDeadlockFree) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 20; ++m) {
      for (ScheduleKind k : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
        Result<Schedule> s = generate(spec_of(k, pp, 1, m, 1));
        ASSERT_TRUE(s.ok()) << s.error().message();
        Result<CheckResult> c = check(*s);
        ASSERT_TRUE(c.ok()) << schedule_kind_name(k) << " pp=" << pp << " m=" << m << ": " << c.error().message();
        // GPipe holds every micro-batch; 1F1B at most PP - r on rank r.
        for (int r = 0; r < pp; ++r) {
          EXPECT_EQ(c->peak_inflight[r], k == ScheduleKind::kGPipe ? m : std::min(m, pp - r));
        }
      }
      if (m % pp != 0) continue;
      for (int v = 1; v <= 4; ++v) {
        Result<Schedule> s = generate(spec_of(ScheduleKind::kInterleaved, pp, v, m, 1));
        ASSERT_TRUE(s.ok()) << s.error().message();
        EXPECT_EQ(s->spec.n, pp);
        Result<CheckResult> c = check(*s);
        ASSERT_TRUE(c.ok()) << "interleaved pp=" << pp << " v=" << v << " m=" << m << ": " << c.error().message();
      }
    }
  }
}

// Megatron-LM's interleaved 1F1B written from its index formulas rather than from groups: the k-th
// forward on a rank runs chunk (k mod PP*V) / PP of micro-batch (k / (PP*V)) * PP + k mod PP, the k-th
// backward the mirrored chunk; rank r warms up with 2*(PP-1-r) + (V-1)*PP forwards, capped at M*V (the
// current Megatron; older versions ran all forwards first when M = PP).
std::vector<std::string> megatron_interleaved(int pp, int v, int m, int rank) {
  const int total = m * v;
  auto chunk = [&](int k, bool fwd) {
    const int c = (k % (pp * v)) / pp;
    return fwd ? c : v - 1 - c;
  };
  auto mb = [&](int k) { return (k / (pp * v)) * pp + k % pp; };
  auto tok = [&](bool fwd, int k) { return token(fwd, mb(k), chunk(k, fwd)); };
  const int warmup = std::min(total, 2 * (pp - 1 - rank) + (v - 1) * pp);
  std::vector<std::string> out;
  for (int k = 0; k < warmup; ++k) out.push_back(tok(true, k));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(tok(true, warmup + k));
    out.push_back(tok(false, k));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(tok(false, k));
  return out;
}

TEST(Generate, InterleavedMatchesMegatronOrder) {
  for (int pp = 2; pp <= 6; ++pp) {
    for (int v = 2; v <= 4; ++v) {
      for (int groups = 1; groups <= 4; ++groups) {
        const int m = groups * pp;
        Result<Schedule> s = generate(spec_of(ScheduleKind::kInterleaved, pp, v, m, 0));
        ASSERT_TRUE(s.ok()) << s.error().message();
        // The flexible schedule with N = PP is the same list.
        Result<Schedule> f = generate(spec_of(ScheduleKind::kFlexible, pp, v, m, pp));
        ASSERT_TRUE(f.ok()) << f.error().message();
        for (int r = 0; r < pp; ++r) {
          EXPECT_EQ(compute_tokens(*s, r), megatron_interleaved(pp, v, m, r))
              << "pp=" << pp << " v=" << v << " m=" << m;
          EXPECT_EQ(s->ranks[r], f->ranks[r]);
        }
      }
    }
  }
}

TEST(Generate, FlexibleOrderOnFigureSixExample) {
  // Llama 3 Figure 6: PP = 4, V = 2, M = 10, N = 5. Rank 0 runs micro-batches 0-4 on chunk 0, then 0-4
  // on chunk 1, then starts 5-9 on chunk 0 while the backwards of chunk 1 begin.
  Result<Schedule> s = generate(spec_of(ScheduleKind::kFlexible, 4, 2, 10, 5));
  ASSERT_TRUE(s.ok());
  const std::vector<std::string> want_head = {"F0.0", "F1.0", "F2.0", "F3.0", "F4.0", "F0.1", "F1.1", "F2.1",
                                              "F3.1", "F4.1", "F5.0", "F6.0", "B0.1", "F7.0", "B1.1"};
  const std::vector<std::string> got = compute_tokens(*s, 0);
  ASSERT_GE(got.size(), want_head.size());
  EXPECT_EQ(std::vector<std::string>(got.begin(), got.begin() + want_head.size()), want_head);
  // The tail is the cool-down: backwards of the last group, chunk 1 then chunk 0.
  EXPECT_EQ(got.back(), "B9.0");
}

Schedule generated(ScheduleKind k, int pp, int v, int m, int n) {
  Result<Schedule> s = generate(spec_of(k, pp, v, m, n));
  HERD_CHECK(s.ok(), s.error().message());
  return *s;
}

std::vector<Action>::iterator find_action(Schedule& s, int rank, ActionType t, int m, int stage) {
  auto& list = s.ranks[rank];
  return std::find_if(list.begin(), list.end(),
                      [&](const Action& a) { return a.type == t && a.microbatch == m && a.stage == stage; });
}

TEST(Check, CatchesMissingSend) {
  Schedule s = generated(ScheduleKind::kFlexible, 4, 2, 6, 4);
  ASSERT_TRUE(check(s).ok());
  s.ranks[1].erase(find_action(s, 1, ActionType::kSendActivation, 2, 5));
  Result<CheckResult> c = check(s);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("send_activation of m=2 s=5"), std::string::npos) << c.error().message();
}

TEST(Check, CatchesMissingBackwardAndReorderedBackward) {
  Schedule s = generated(ScheduleKind::k1F1B, 3, 1, 5, 1);
  s.ranks[2].erase(find_action(s, 2, ActionType::kBackward, 4, 2));
  Result<CheckResult> c = check(s);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("missing backward of m=4 s=2"), std::string::npos) << c.error().message();

  Schedule t = generated(ScheduleKind::kGPipe, 2, 1, 3, 1);
  // Move rank 1's first backward (with its send) to the very front: it would run before its forward.
  auto b = find_action(t, 1, ActionType::kBackward, 0, 1);
  const Action back = *b, send = *(b + 1);
  t.ranks[1].erase(b, b + 2);
  t.ranks[1].insert(t.ranks[1].begin(), {back, send});
  c = check(t);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("precedes its forward"), std::string::npos) << c.error().message();
}

TEST(Check, CatchesDeadlock) {
  // Two ranks, two micro-batches. Rank 1 runs GPipe order (it waits for micro-batch 1's activation
  // before any backward); rank 0 runs backward 0 before forward 1 (it waits for the gradient of
  // micro-batch 0 before sending micro-batch 1). Each list is locally valid; together they are a cycle.
  Schedule s = generated(ScheduleKind::kGPipe, 2, 1, 2, 1);
  using T = ActionType;
  s.ranks[0] = {{T::kForward, 0, 0, -1},  {T::kSendActivation, 0, 0, 1}, {T::kRecvGrad, 0, 0, 1},
                {T::kBackward, 0, 0, -1}, {T::kForward, 1, 0, -1},       {T::kSendActivation, 1, 0, 1},
                {T::kRecvGrad, 1, 0, 1},  {T::kBackward, 1, 0, -1}};
  Result<CheckResult> c = check(s);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("deadlock"), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("rank 0 action 2 (recv_grad m=0 s=0"), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("rank 1 action 2 (recv_activation m=1 s=1"), std::string::npos)
      << c.error().message();
  // The same rank-0 list against a 1F1B rank 1 is fine: the checker is not just refusing the shape.
  Schedule ok = generated(ScheduleKind::k1F1B, 2, 1, 2, 1);
  ok.ranks[0] = s.ranks[0];
  EXPECT_TRUE(check(ok).ok());
}

TEST(Check, CatchesWrongPeerAndWrongRank) {
  Schedule s = generated(ScheduleKind::kFlexible, 4, 1, 4, 4);
  find_action(s, 0, ActionType::kSendActivation, 0, 0)->peer = 2;
  Result<CheckResult> c = check(s);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("peer should be rank 1"), std::string::npos) << c.error().message();
  Schedule t = generated(ScheduleKind::kFlexible, 4, 1, 4, 4);
  t.ranks[0].push_back({ActionType::kForward, 0, 1, -1});
  c = check(t);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("lives on rank 1"), std::string::npos) << c.error().message();
}

TEST(Validate, OneLineErrorsWithNumbers) {
  auto msg = [](ScheduleSpec s) {
    Status st = validate(s);
    return st.ok() ? std::string() : st.error().message();
  };
  EXPECT_NE(msg(spec_of(ScheduleKind::kFlexible, 4, 0, 8, 4)).find("v (0)"), std::string::npos);
  EXPECT_NE(msg(spec_of(ScheduleKind::kFlexible, 4, 2, 8, 9)).find("n (9) must not exceed microbatches (8)"),
            std::string::npos);
  EXPECT_NE(msg(spec_of(ScheduleKind::kInterleaved, 4, 2, 6, 4)).find("microbatches (6) must be a multiple of pp (4)"),
            std::string::npos);
  EXPECT_NE(msg(spec_of(ScheduleKind::k1F1B, 4, 2, 8, 4)).find("v (2) must be 1"), std::string::npos);
  EXPECT_NE(msg(spec_of(ScheduleKind::kFlexible, 0, 2, 8, 4)).find("pp (0)"), std::string::npos);
  EXPECT_TRUE(msg(spec_of(ScheduleKind::kFlexible, 8, 2, 4, 3)).empty());
  EXPECT_NE(msg(spec_of(ScheduleKind::kFlexible, 64, 64, 1 << 20, 64)).find("exceeds 4194304"), std::string::npos);
  for (const std::string& m :
       {msg(spec_of(ScheduleKind::kFlexible, 4, 0, 8, 4)), msg(spec_of(ScheduleKind::kFlexible, 4, 2, 8, 9))}) {
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  EXPECT_FALSE(generate(spec_of(ScheduleKind::kFlexible, 4, 2, 8, 9)).ok());
  EXPECT_EQ(*parse_schedule_kind("1f1b"), ScheduleKind::k1F1B);
  EXPECT_FALSE(parse_schedule_kind("zb").ok());
}

}  // namespace
}  // namespace herd::schedule
