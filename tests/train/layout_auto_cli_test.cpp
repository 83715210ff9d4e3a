// `herd train --layout auto [--ranks N]`: the planner's ranking is printed and the first layout of it
// trains; the ranking is `herd plan`'s on the same inputs (model, calibrated cluster, rank count, batch,
// fp32), row by row; bad --layout / --ranks values are one line each. Also the calibration a plan uses:
// this machine's stored one (with its age), or, when there is none, a plan that says it is uncalibrated.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli_runner.h"
#include "herd/core/json.h"
#include "herd/train/plan/calibration_store.h"
#include "train/parity_run_dir.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

class LayoutAuto : public herd::testing::ParityRunDir {
 protected:
  LayoutAuto() : ParityRunDir("herd_layout_auto", /*held_out=*/true) {}
  herd::testing::CliResult train(const std::string& args) {
    return herd::testing::run_herd("train " + data_and_model() +
                                   " --data.seq_len=16 --train.global_batch=8 --train.steps=3 --eval.every=0"
                                   " --eval.batches=1 --generate.samples=0 --calibration-dir " +
                                   (dir_ / "store").string() + " " + args);
  }
  // A `herd calibrate` output committed with the projection benchmark: a fixed, calibrated cluster.
  static std::string cluster() { return std::string(HERD_SOURCE_DIR) + "/bench/projection/local-cpu.json"; }
};

struct Row {
  std::int64_t tp, cp, pp, dp, v, mb;
  std::string sp, step;
};

// The rows of the ranking table `herd train --layout auto` prints ("  1   1   1   1   2  1   4 ...").
std::vector<Row> ranking_rows(const std::string& out) {
  std::vector<Row> rows;
  const auto at = out.find("layout auto: ");
  if (at == std::string::npos) return rows;
  std::istringstream in(out.substr(at));
  std::string line;
  std::getline(in, line);  // the heading line
  std::getline(in, line);  // column names
  std::getline(in, line);  // rule
  while (std::getline(in, line)) {
    std::istringstream f(line);
    Row r;
    std::int64_t rank = 0, big_m = 0, n = 0;
    std::string recompute;
    if (!(f >> rank >> r.tp >> r.cp >> r.pp >> r.dp >> r.v >> r.mb >> big_m >> n >> recompute >> r.sp >> r.step)) break;
    rows.push_back(r);
  }
  return rows;
}

TEST_F(LayoutAuto, TrainsThePlannersFirstChoiceAndPrintsHerdPlansRanking) {
  const std::string summary = (dir_ / "p.json").string();
  auto r =
      train("--layout auto --ranks 2 --projection.cluster_file=" + cluster() + " --train.projection_file=" + summary);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const std::vector<Row> rows = ranking_rows(r.out);
  ASSERT_GE(rows.size(), 2u) << r.out;

  // The same search by `herd plan`, as JSON.
  auto p = herd::testing::run_herd("plan --model " + (dir_ / "config.json").string() + " --cluster " + cluster() +
                                   " --gpus 2 --seq-len 16 --global-batch 8 --precision fp32 --top 100 --json");
  ASSERT_EQ(p.status, 0) << p.err;
  const Json plan = Json::parse(p.out);
  ASSERT_EQ(plan.size(), rows.size()) << r.out << p.out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Json& l = plan[i]["layout"];
    EXPECT_EQ(rows[i].tp, l["tp"].get<std::int64_t>()) << i;
    EXPECT_EQ(rows[i].cp, l["cp"].get<std::int64_t>()) << i;
    EXPECT_EQ(rows[i].pp, l["pp"].get<std::int64_t>()) << i;
    EXPECT_EQ(rows[i].dp, l["dp"].get<std::int64_t>()) << i;
    EXPECT_EQ(rows[i].v, l["v"].get<std::int64_t>()) << i;
    EXPECT_EQ(rows[i].mb, l["microbatch_size"].get<std::int64_t>()) << i;
    // Sequence parallelism is searched as `herd plan` searches it (with TP only) and trained as chosen.
    EXPECT_EQ(rows[i].sp, rows[i].tp == 1 ? "-" : (l["sequence_parallel"].get<bool>() ? "yes" : "no")) << i;
    std::ostringstream step;
    step.setf(std::ios::fixed);
    step.precision(3);
    step << plan[i]["step_time_s"].get<double>();
    EXPECT_EQ(rows[i].step, step.str()) << i;
  }
  // The job trained the first row, as the projection file and the progress line say.
  EXPECT_NE(r.out.find("layout auto: chose #1, --tp " + std::to_string(rows[0].tp)), std::string::npos) << r.out;
  const Json j = Json::parse(herd::testing::slurp(summary));
  EXPECT_EQ(j["layout"]["tp"], rows[0].tp);
  EXPECT_EQ(j["layout"]["cp"], rows[0].cp);
  EXPECT_EQ(j["layout"]["pp"], rows[0].pp);
  EXPECT_EQ(j["layout"]["dp"], rows[0].dp);
  EXPECT_EQ(j["layout"]["sequence_parallel"].get<bool>(), rows[0].sp == "yes");
  EXPECT_EQ(j["layout"]["micro_batch"], rows[0].mb);
  EXPECT_EQ(j["layout"]["ranks"], 2);
  EXPECT_EQ(j["measured"]["steps"], 3);
}

TEST_F(LayoutAuto, BadValuesAreOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--layout manual", "--layout: expected auto, got 'manual'"},
      {"--ranks 2", "--ranks 2: only with --layout auto"},
      {"--layout auto --tp 2", "--layout auto chooses the degrees, but --tp 2 was given"},
      {"--layout auto --ranks 7", "--layout auto: none of the"},
      {"--layout auto --ranks 0", "--ranks"},
  };
  for (const auto& [args, message] : cases) {
    auto r = train(args + " --projection.cluster_file=" + cluster());
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

// No stored calibration: the plan says it is uncalibrated, on its own line and on the planned line.
// After `herd calibrate` into the store, the next run uses it and prints its age.
TEST_F(LayoutAuto, APlanSaysWhetherItIsCalibrated) {
  auto before = train("");
  ASSERT_EQ(before.status, 0) << before.err;
  const std::string all = before.out + before.err;
  EXPECT_NE(all.find("uncalibrated: no calibration of this machine"), std::string::npos) << all;
  EXPECT_NE(all.find("planned (local-cpu preset, uncalibrated, 1 rank"), std::string::npos) << all;

  auto cal = herd::testing::run_herd("calibrate --model " + (dir_ / "config.json").string() +
                                     " --micro-batch 2 --seq-len 16 --repeats 1 --calibration-dir " +
                                     (dir_ / "store").string());
  ASSERT_EQ(cal.status, 0) << cal.err;
  auto after = train("");
  ASSERT_EQ(after.status, 0) << after.err;
  const std::string all2 = after.out + after.err;
  EXPECT_NE(all2.find("calibrated 0 min ago ("), std::string::npos) << all2;
  EXPECT_NE(all2.find((dir_ / "store").string()), std::string::npos) << all2;
  EXPECT_NE(all2.find("planned (local-cpu, 1 rank"), std::string::npos) << all2;
  EXPECT_EQ(all2.find("uncalibrated"), std::string::npos) << all2;

  // --if-missing keeps it and measures nothing.
  auto again = herd::testing::run_herd("calibrate --model " + (dir_ / "config.json").string() +
                                       " --micro-batch 2 --seq-len 16 --if-missing --calibration-dir " +
                                       (dir_ / "store").string());
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("(kept: --if-missing)"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find("gemm"), std::string::npos) << again.out;

  // The file records the runtime fingerprint of the build that measured it. A calibration made by
  // another build times other kernels: the planned run says so, and --if-missing measures again.
  std::filesystem::path stored;
  for (const auto& e : std::filesystem::directory_iterator(dir_ / "store")) stored = e.path();
  ASSERT_FALSE(stored.empty());
  auto read = [&] {
    std::ifstream f(stored);
    return herd::Json::parse(f);
  };
  herd::Json doc = read();
  ASSERT_EQ(doc["calibration"]["runtime_fingerprint"], runtime_fingerprint());
  doc["calibration"]["runtime_fingerprint"] = "0123456789abcdef";
  std::ofstream(stored) << doc.dump(1);
  auto stale = train("");
  ASSERT_EQ(stale.status, 0) << stale.err;
  const std::string all3 = stale.out + stale.err;
  EXPECT_NE(all3.find("measured by another build of herd (runtime 0123456789abcdef, this build " +
                      runtime_fingerprint() + "), so its plans may be off: run `herd calibrate`"),
            std::string::npos)
      << all3;
  auto redo = herd::testing::run_herd("calibrate --model " + (dir_ / "config.json").string() +
                                      " --micro-batch 2 --seq-len 16 --repeats 1 --if-missing --calibration-dir " +
                                      (dir_ / "store").string());
  ASSERT_EQ(redo.status, 0) << redo.err;
  EXPECT_NE(redo.out.find("was measured by another build of herd (runtime 0123456789abcdef"), std::string::npos)
      << redo.out;
  EXPECT_EQ(redo.out.find("(kept: --if-missing)"), std::string::npos) << redo.out;
  doc = read();
  EXPECT_EQ(doc["calibration"]["runtime_fingerprint"], runtime_fingerprint());
  EXPECT_EQ(doc["calibration"]["previous"]["path"], stored.string());
  // An older file without the field reads as "not recorded", never as this build.
  doc["calibration"].erase("runtime_fingerprint");
  std::ofstream(stored) << doc.dump(1);
  Result<StoredCalibration> old = read_calibration(stored.string());
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->measured_by_this_build());
  EXPECT_NE(calibration_line(*old, unix_now()).find("(runtime not recorded, this build "), std::string::npos);
}

// A take far (1.5x) from the last calibration of the same shapes is redone and said. herd's own training
// steps are compared only with a calibration made by this build, whose steps time the same kernels; the
// libraries' GEMM rates are compared with any.
TEST_F(LayoutAuto, TakesFarFromTheLastCalibrationAreRedoneAndStepsOnlyAgainstThisBuild) {
  const std::string calibrate = "calibrate --model " + (dir_ / "config.json").string() +
                                " --micro-batch 2 --seq-len 16 --repeats 1 --takes 2 --background-jobs 0 --out ";
  auto first = herd::testing::run_herd(calibrate + (dir_ / "first.json").string() + " --previous none");
  ASSERT_EQ(first.status, 0) << first.err;
  std::ifstream f(dir_ / "first.json");
  herd::Json doc = herd::Json::parse(f);
  herd::Json& rec = doc["calibration"];
  ASSERT_EQ(rec["runtime_fingerprint"], runtime_fingerprint());
  // A "last calibration" 100x slower in both GEMM and step than this machine is today.
  rec["gemm_flops_per_s_one_thread"] = rec["gemm_flops_per_s_one_thread"].get<double>() / 100;
  rec["reference_step_s"] = rec["reference_step_s"].get<double>() * 100;
  std::ofstream((dir_ / "same_build.json").string()) << doc.dump(1);
  rec["runtime_fingerprint"] = "0123456789abcdef";
  std::ofstream((dir_ / "other_build.json").string()) << doc.dump(1);

  // What a calibration compared with `previous` prints (its "disturbed and redone" line among it).
  auto calibrate_after = [&](const std::string& previous) {
    auto r = herd::testing::run_herd(calibrate + (dir_ / (previous + ".out.json")).string() + " --previous " +
                                     (dir_ / previous).string());
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out + r.err;
  };
  const std::string same = calibrate_after("same_build.json");
  EXPECT_NE(same.find("GEMM rate"), std::string::npos) << same;
  EXPECT_NE(same.find("reference step"), std::string::npos) << same;
  EXPECT_NE(same.find("x the last calibration's"), std::string::npos) << same;
  const std::string other = calibrate_after("other_build.json");
  EXPECT_NE(other.find("GEMM rate"), std::string::npos) << other;
  EXPECT_EQ(other.find("reference step"), std::string::npos) << other;
}

}  // namespace
}  // namespace herd::train
