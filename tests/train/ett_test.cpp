// The time accounting of a supervised job (train/job/ett.h) against hand-computed figures, and the metrics
// file's rewrite on resume (train/step/metrics.h): redone steps are dropped, then marked, never duplicated.
#include "herd/train/job/ett.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "herd/train/step/metrics.h"

namespace herd::train {
namespace {

Json rec(std::int64_t step, double time, double step_s, double checkpoint_s = -1) {
  Json j = {{"step", step}, {"loss", 1.0}, {"time", time}, {"step_s", step_s}};
  if (checkpoint_s >= 0) j["checkpoint_s"] = checkpoint_s;
  return j;
}

// Attempt 0 starts at 100, steps 1..3 end at 103, 104, 105 (step 2 checkpoints for 0.5 s), dies at 106.5;
// a 1 s backoff; attempt 1 starts at 107.5, resumes from step 2, redoes step 3 (ends 110), step 4 ends
// 111, exits at 112. The supervisor ran from 99.5 to 112.5.
TEST(Ett, AccountsEverySecondOfTheWallTime) {
  Attempt a0{100, 106.5, 1, {rec(1, 103, 1), rec(2, 104, 1, 0.5), rec(3, 105, 1)}};
  Attempt a1{107.5, 112, 0, {rec(3, 110, 1), rec(4, 111, 1)}};
  const EttSummary s = account_ett({a0, a1}, 99.5, 112.5);
  EXPECT_DOUBLE_EQ(s.wall_s, 13);
  EXPECT_DOUBLE_EQ(s.startup_s, 2);                   // 100 -> 102 (step 1 started at 103 - 1)
  EXPECT_DOUBLE_EQ(s.restart_s, 1.5);                 // 107.5 -> 109
  EXPECT_DOUBLE_EQ(s.productive_s, 1 + 0.5 + 1 + 1);  // steps 1, 2 (less its checkpoint), then 3 and 4
  EXPECT_DOUBLE_EQ(s.checkpoint_s, 0.5);
  EXPECT_DOUBLE_EQ(s.lost_s, 1 + 1.5);                              // the first step 3, then 105 -> 106.5
  EXPECT_DOUBLE_EQ(s.backoff_s, 1);                                 // 106.5 -> 107.5
  EXPECT_DOUBLE_EQ(s.other_s, 13 - 2 - 1.5 - 3.5 - 0.5 - 2.5 - 1);  // 99.5->100, 111->112.5
  EXPECT_EQ(s.restarts, 1);
  EXPECT_EQ(s.steps, 4);
  EXPECT_EQ(s.redone_steps, 1);
  EXPECT_DOUBLE_EQ(s.ett(), 3.5 / 13);
  const Json j = s.to_json();
  for (const char* k : {"ett", "restarts", "lost_s", "restart_s"}) EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_NE(s.lines().back().find("ETT 26.9%"), std::string::npos) << s.lines().back();
}

TEST(Ett, AnAttemptThatDiesBeforeItsFirstStepIsRestartTime) {
  Attempt a0{0, 2, 1, {}};
  Attempt a1{2, 5, 0, {rec(1, 4, 1)}};
  const EttSummary s = account_ett({a0, a1}, 0, 5);
  EXPECT_DOUBLE_EQ(s.startup_s, 2);
  EXPECT_DOUBLE_EQ(s.restart_s, 1);
  EXPECT_DOUBLE_EQ(s.productive_s, 1);
  EXPECT_DOUBLE_EQ(s.other_s, 1);
}

TEST(Ett, AResumedMetricsFileDropsTheStepsAfterTheCheckpointAndMarksTheRedoneOnes) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("herd_ett_" + std::to_string(::getpid()) + ".jsonl")).string();
  {
    std::ofstream out(path);
    for (int s = 1; s <= 5; ++s) out << rec(s, 100 + s, 1).dump() << "\n";
    out << Json{{"ett", 0.5}, {"restarts", 0}}.dump() << "\n";  // a previous supervisor's summary
  }
  Result<MetricsWriter> w = MetricsWriter::open(path, 3);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(w->redone_until(), 5);
  ASSERT_TRUE(w->write(rec(4, 200, 1)).ok());
  std::vector<Json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
  ASSERT_EQ(lines.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(lines[static_cast<std::size_t>(i)]["step"], i + 1);
  EXPECT_EQ(read_step_records(path, 150).size(), 1u);  // the records written since
  Result<MetricsWriter> fresh = MetricsWriter::open(path, -1);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->redone_until(), 0);
  EXPECT_TRUE(read_step_records(path, 0).empty());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace herd::train
