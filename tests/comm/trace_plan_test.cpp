// The trace against the plan on scripted dumps of a PP2 x DP2 job (ranks 0, 2 in stage 0; 1, 3 in
// stage 1): a stage the plan knows is heavier does not depart; a rank slower than its stage's plan is
// named; a stage whose every rank is off the plan is named as the stage (PP3 x DP2); a uniform miss of the whole
// run (a host slower than its calibration) names nobody; bad plans and plans of another job are one
// line naming the field.
#include "herd/comm/trace_plan.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/scratch_dir.h"

namespace herd::comm {
namespace {

// Rank r's dump: the pp group of its data-parallel column, and 20 steps of `own` seconds of CPU.
RankDump dump(int r, double own, double wait) {
  RankDump d;
  d.rank = r;
  d.host = "node" + std::to_string(r);
  d.groups.push_back({7 + r % 2, "pp", {2 * (r / 2), 2 * (r / 2) + 1}});
  for (int step = 1; step <= 20; ++step) d.steps.push_back({step, own + 0.0001 * (step % 3), wait});
  return d;
}

// Stage 1 is planned twice as heavy as stage 0 (the head and loss), 0.1 s of optimizer on each.
PlannedSteps plan() {
  PlannedSteps p;
  p.stage_busy_s = {0.4, 0.9};
  p.optimizer_s = 0.1;
  p.step_s = 1.2;
  p.source = "proj.json";
  return p;
}

// The ranks' own times: stage 0 ranks at `s0` x their plan, stage 1 at `s1`, rank 3 times `slow`.
std::vector<RankDump> job(double s0, double s1, double slow) {
  return {dump(0, 0.5 * s0, 0.3), dump(1, 1.0 * s1, 0.1), dump(2, 0.5 * s0, 0.3), dump(3, 1.0 * s1 * slow, 0.0)};
}

TEST(TracePlan, AStageThePlanKnowsIsHeavierDoesNotDepart) {
  const Result<PlanComparison> c = compare_with_plan(job(0.5, 0.5, 1.0), plan());
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->departing_rank, -1) << c->finding;
  EXPECT_NEAR(c->median_ratio, 0.5, 1e-3);  // the host is twice as fast as its calibration: nobody departs
  EXPECT_EQ(c->steps, kStragglerWindow);
  EXPECT_NE(c->finding.find("no rank departs from the plan"), std::string::npos) << c->finding;
  ASSERT_EQ(c->ranks.size(), 4u);
  EXPECT_EQ(c->ranks[1].stage, 1);
  EXPECT_NEAR(c->ranks[1].planned_s, 1.0, 1e-12);
  EXPECT_NEAR(c->ranks[0].planned_wait_s, 0.7, 1e-12);
}

TEST(TracePlan, ARankSlowerThanItsStagesPlanIsNamed) {
  const Result<PlanComparison> c = compare_with_plan(job(1.0, 1.0, 1.8), plan());
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->departing_rank, 3) << c->finding;
  EXPECT_EQ(c->departing_stage, -1) << c->finding;
  EXPECT_NEAR(c->ranks[3].departure, 1.8, 0.01);
  EXPECT_EQ(c->finding.rfind("rank 3 (stage 1) departs most from the plan", 0), 0u) << c->finding;
  const std::string text = plan_comparison_text(*c, plan());
  EXPECT_NE(text.find("rank 3 stage 1: own time"), std::string::npos) << text;
  const Json j = plan_comparison_json(*c, plan());
  EXPECT_EQ(j["departing_rank"], 3);
  EXPECT_EQ(j["ranks"].size(), 4u);
}

// A PP3 x DP2 job whose stage 2 (ranks 2 and 5) both take 1.6x their plan, the others on it.
TEST(TracePlan, AStageWhoseEveryRankIsOffThePlanIsNamed) {
  PlannedSteps p = plan();
  p.stage_busy_s = {0.4, 0.4, 0.9};
  std::vector<RankDump> dumps;
  for (int r = 0; r < 6; ++r) {
    RankDump d = dump(r, r % 3 == 2 ? 1.6 : 0.5, 0.1);
    d.groups = {{9 + r / 3, "pp", {3 * (r / 3), 3 * (r / 3) + 1, 3 * (r / 3) + 2}}};
    dumps.push_back(std::move(d));
  }
  const Result<PlanComparison> c = compare_with_plan(dumps, p);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->departing_stage, 2) << c->finding;
  EXPECT_EQ(c->finding.rfind("pipeline stage 2 departs most from the plan", 0), 0u) << c->finding;
}

TEST(TracePlan, WrongPlansAndDumpsWithoutStepsAreOneLine) {
  std::vector<RankDump> none = job(1, 1, 1);
  for (RankDump& d : none) d.steps.clear();
  Result<PlanComparison> c = compare_with_plan(none, plan());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("no dump carries step times"), std::string::npos);
  PlannedSteps one = plan();
  one.stage_busy_s = {0.4};
  c = compare_with_plan(job(1, 1, 1), one);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("rank 1 is in pipeline stage 1 but proj.json plans 1 stage(s)"), std::string::npos)
      << c.error().message();

  herd::testing::ScratchDir dir("herd_trace_plan");
  std::filesystem::create_directories(dir.path);
  const std::string file = (dir.path / "p.json").string();
  auto plan_error = [&](const std::string& text) {
    std::ofstream(file) << text;
    const Result<PlannedSteps> p = read_planned_steps(file);
    return p.ok() ? std::string("ok") : p.error().message();
  };
  EXPECT_NE(plan_error("{}").find("no \"planned\" object"), std::string::npos);
  EXPECT_NE(plan_error(R"({"planned": {"step_s": 1}})").find("planned.pipeline_rank_busy_s: missing"),
            std::string::npos);
  EXPECT_NE(plan_error(R"({"planned": {"step_s": 1, "pipeline_rank_busy_s": [0.1, "x"]}})")
                .find("expected seconds >= 0, got \"x\""),
            std::string::npos);
  EXPECT_NE(plan_error(R"({"planned": {"pipeline_rank_busy_s": [0.1]}})").find("step_s"), std::string::npos);
  const std::string ok = plan_error(R"({"planned": {"step_s": 1, "optimizer_s": 0.1, "pipeline_rank_busy_s": [0.5]}})");
  EXPECT_EQ(ok, "ok");
  EXPECT_NE(plan_error("{").find(file), std::string::npos);
}

}  // namespace
}  // namespace herd::comm
