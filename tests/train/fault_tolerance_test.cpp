// Checkpoints that survive what a real job meets, and the NaN guard, with ranks as threads:
// - preemption (the SIGTERM flag raised while a TP2 x DP2 job trains, at a step's start) stops every rank after the
// same
//   step with a checkpoint, and the resumed run ends bit-identical to an uninterrupted one;
// - a writer killed (SIGKILL) at 50 random moments of its saves never leaves a checkpoint that resume
//   picks up half-written, and what it leaves is removed by the stale cleanup;
// - a failed save (fault.fail_checkpoint_step, and a real write failure under RLIMIT_FSIZE) keeps the
//   previous checkpoint, names the path and the errno text, and follows checkpoint.on_error;
// - an unwritable checkpoint.dir is refused at start; asynchronous and synchronous saves write the same
//   bytes; the metrics file records checkpoint_s;
// - the NaN guard skips an injected NaN (the weights are exactly those of the run stopped before that
//   step) or stops the job without a checkpoint of it, and names the step and the tensor group.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "common/scratch_dir.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/checkpoint/checkpoint_writer.h"
#include "herd/train/job/job.h"
#include "herd/train/job/preempt.h"
#include "train/dist_harness.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

using herd::testing::ScratchDir;

TrainConfig base_config(const std::string& ckpt_dir, std::int64_t tp = 2, std::int64_t dp = 2) {
  TrainConfig c = testing::parity_config(8);
  testing::set_layout(c, tp, 1, 1, dp);
  c.eval.every = 0;
  c.checkpoint.dir = ckpt_dir;
  c.checkpoint.every = 2;
  c.checkpoint.keep = 3;
  c.parallel.comm_timeout_s = 30;  // a test that hangs fails in seconds, not minutes
  return c;
}

Result<JobResult<float>> run(const TrainConfig& c, std::int64_t stop_after = 0,
                             std::function<std::unique_ptr<StepClock>(int)> step_clock = nullptr) {
  JobResult<float> out;
  out.quiet = true;
  out.step_clock = std::move(step_clock);
  HERD_RETURN_IF_ERROR(run_local_job<float>(c, testing::parity_model(),
                                            {testing::parity_docs(40, 1), testing::parity_docs(10, 2)}, &out,
                                            stop_after, /*gather=*/true));
  return out;
}

std::vector<std::string> tmp_dirs(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

std::vector<char> bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<Json> metrics_lines(const std::string& path) {
  std::vector<Json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
  return out;
}

void expect_same_weights(const JobResult<float>& a, const JobResult<float>& b) {
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_EQ(a.weights[i].second, b.weights[i].second) << a.weights[i].first;
  }
}

// --- preemption -------------------------------------------------------------------------------------

// Rank 0's measured step clock, which raises the preemption flag (as the SIGTERM handler would) when
// step `at` starts: the job sees it at that step's control all-reduce, whatever the host's speed.
class PreemptingClock final : public StepClock {
 public:
  PreemptingClock(int rank, std::int64_t at) : rank_(rank), at_(at) {}
  void start_step() override {
    if (++step_ == at_ && rank_ == 0) request_preemption();
    clock_->start_step();
  }
  comm::FlightRecorder::StepTimes split(std::int64_t step) override { return clock_->split(step); }
  void compute_for(double cpu_s) override { clock_->compute_for(cpu_s); }
  void stall_for(double s) override { clock_->stall_for(s); }

 private:
  int rank_;
  std::int64_t at_, step_ = 0;
  std::unique_ptr<StepClock> clock_ = measured_step_clock(nullptr);
};

TEST(Preemption, TheSigtermFlagStopsEveryRankWithACheckpointThatResumesBitExactly) {
  ScratchDir full_dir("herd_pre_full"), dir("herd_pre");
  TrainConfig c = base_config(full_dir.path.string());
  c.train.steps = 12;
  c.checkpoint.every = 1000;  // only the end's checkpoint (and the preemption's)
  Result<JobResult<float>> full = run(c);
  ASSERT_TRUE(full.ok()) << full.error().message();
  EXPECT_FALSE(full->preempted);

  c.checkpoint.dir = dir.path.string();
  c.train.metrics_file = (dir.path / "metrics.jsonl").string();
  fs::create_directories(dir.path);
  clear_preemption();
  // The flag goes up while the job trains, as step 5 starts on rank 0; every rank stops after it.
  Result<JobResult<float>> first = run(c, 0, [](int rank) { return std::make_unique<PreemptingClock>(rank, 5); });
  clear_preemption();
  ASSERT_TRUE(first.ok()) << first.error().message();
  ASSERT_TRUE(first->preempted);
  const std::int64_t stopped = first->history.back().step;
  ASSERT_EQ(stopped, 5);
  EXPECT_TRUE(fs::exists(dir.path / step_dir_name(stopped)));
  EXPECT_TRUE(tmp_dirs(dir.path).empty());
  EXPECT_GE(metrics_lines(c.train.metrics_file).back().value("checkpoint_s", -1.0), 0.0);

  Result<JobResult<float>> second = run(c);
  ASSERT_TRUE(second.ok()) << second.error().message();
  EXPECT_EQ(second->resumed_from, stopped);
  ASSERT_EQ(second->history.size(), static_cast<std::size_t>(12 - stopped));
  for (const StepRecord& r : second->history) {
    const StepRecord& w = full->history[static_cast<std::size_t>(r.step - 1)];
    EXPECT_EQ(r.loss, w.loss) << "step " << r.step;
    EXPECT_EQ(r.grad_norm, w.grad_norm) << "step " << r.step;
  }
  expect_same_weights(*full, *second);
}

// --- killed writers -----------------------------------------------------------------------------------

// The pieces of a fake rank whose values say which step saved them.
struct FakeRank {
  std::vector<float> param, m, v;
  std::vector<parallel::ShardPiece<float>> pieces;
  explicit FakeRank(std::int64_t n) : param(static_cast<std::size_t>(n)), m(param.size()), v(param.size()) {
    parallel::ShardPiece<float> p;
    p.name = "w";
    p.rows = n;
    p.cols = 1;
    p.r1 = n;
    p.c1 = 1;
    p.e1 = n;
    p.param = param.data();
    p.m = m.data();
    p.v = v.data();
    pieces.push_back(p);
  }
  void fill(std::int64_t step) {
    for (std::size_t i = 0; i < param.size(); ++i) {
      param[i] = static_cast<float>(step) + static_cast<float>(i % 97) * 1e-3f;
      m[i] = -param[i];
      v[i] = 2 * param[i];
    }
  }
};

TEST(Checkpoint, WritersKilledAtRandomMomentsNeverLeaveAHalfWrittenCheckpointOrStaleTemporaries) {
  ScratchDir d("herd_kills");
  fs::create_directories(d.path);
  std::mt19937 rng(12345);
  int saw_tmp = 0, saw_checkpoint = 0;
  for (int kill = 0; kill < 50; ++kill) {
    SCOPED_TRACE("kill " + std::to_string(kill));
    const bool async = kill % 2 == 0;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child saves step after step (3 MB shards) until it is killed.
      FakeRank r(1 << 18);
      CheckpointWriter::Options o;
      o.dir = d.path.string();
      o.keep = 2;
      o.async = async;
      CheckpointWriter w(o);
      const std::vector<std::string> have = list_checkpoints(o.dir);
      std::int64_t step = have.empty() ? 1 : std::stoll(fs::path(have[0]).filename().string().substr(5)) + 1;
      for (;; ++step) {
        w.wait_idle();
        r.fill(step);
        snapshot_pieces<float>(r.pieces, w.buffer());
        w.start(step, Json::object(), Json::object(), false);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 60000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    saw_tmp += tmp_dirs(d.path).empty() ? 0 : 1;

    // What resume would pick verifies and holds exactly the values of its step.
    Result<std::optional<DistCheckpoint>> ck = open_latest_checkpoint(d.path.string(), /*fallback=*/false);
    ASSERT_TRUE(ck.ok()) << ck.error().message();
    if (ck->has_value()) {
      ++saw_checkpoint;
      FakeRank want(1 << 18), got(1 << 18);
      want.fill((*ck)->step);
      ASSERT_TRUE((*ck)->load_into<float>(got.pieces).ok());
      ASSERT_EQ(got.param, want.param);
      ASSERT_EQ(got.v, want.v);
    }
    // The next start's cleanup leaves no temporary directory behind.
    remove_stale_tmp(d.path.string());
    ASSERT_TRUE(tmp_dirs(d.path).empty());
  }
  // The kills did land in the middle of saves, and saves did complete between them.
  EXPECT_GT(saw_tmp, 0);
  EXPECT_GT(saw_checkpoint, 0);
}

// --- failed saves -------------------------------------------------------------------------------------

TEST(Checkpoint, AFailedSaveKeepsThePreviousCheckpointAndFollowsOnError) {
  for (bool async : {true, false}) {
    SCOPED_TRACE(async ? "async" : "sync");
    ScratchDir d("herd_fail");
    TrainConfig c = base_config(d.path.string());
    c.checkpoint.async = async;
    c.fault.fail_checkpoint_step = 4;
    Result<JobResult<float>> r = run(c);
    ASSERT_FALSE(r.ok());
    const std::string msg = r.error().message();
    EXPECT_NE(msg.find(std::strerror(ENOSPC)), std::string::npos) << msg;
    EXPECT_NE(msg.find(d.path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("checkpoint.on_error=stop"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    EXPECT_TRUE(fs::exists(d.path / step_dir_name(2)));
    EXPECT_FALSE(fs::exists(d.path / step_dir_name(4)));
    EXPECT_TRUE(tmp_dirs(d.path).empty());
    Result<std::optional<DistCheckpoint>> ck = open_latest_checkpoint(d.path.string(), false);
    ASSERT_TRUE(ck.ok() && ck->has_value());
    // A synchronous save fails on its own step; an asynchronous one is known a step boundary or two later
    // (the save of step 6 may have been started by then), and the job stops there.
    if (async) {
      EXPECT_TRUE((*ck)->step == 2 || (*ck)->step == 6) << (*ck)->step;
    } else {
      EXPECT_EQ((*ck)->step, 2);
    }
    const std::int64_t newest = (*ck)->step;

    // Restarted, the fault does not fire again (once per job): the job resumes and finishes.
    Result<JobResult<float>> again = run(c);
    ASSERT_TRUE(again.ok()) << again.error().message();
    EXPECT_EQ(again->resumed_from, newest);
    EXPECT_TRUE(fs::exists(d.path / step_dir_name(8)));
    if (!async) {
      EXPECT_TRUE(fs::exists(d.path / step_dir_name(4)));
    }

    // With on_error=continue, a fresh job warns, trains on and saves at the next checkpoint steps.
    c.checkpoint.on_error = "continue";
    fs::remove_all(d.path);
    Result<JobResult<float>> cont = run(c);
    ASSERT_TRUE(cont.ok()) << cont.error().message();
    EXPECT_FALSE(fs::exists(d.path / step_dir_name(4)));
    EXPECT_TRUE(fs::exists(d.path / step_dir_name(6)));
    EXPECT_TRUE(fs::exists(d.path / step_dir_name(8)));
    EXPECT_TRUE(tmp_dirs(d.path).empty());
  }
}

// A real write failure: a file-size limit (RLIMIT_FSIZE) below the shard's size, in a child process.
TEST(Checkpoint, ARealWriteFailureKeepsThePreviousCheckpoint) {
  ScratchDir d("herd_fsize");
  fs::create_directories(d.path);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FakeRank r(1 << 16);  // 768 KB shard
    CheckpointWriter::Options o;
    o.dir = d.path.string();
    CheckpointWriter w(o);
    r.fill(1);
    snapshot_pieces<float>(r.pieces, w.buffer());
    w.start(1, Json::object(), Json::object(), false);
    std::optional<CheckpointWriter::Outcome> first = w.wait();
    if (!first || !first->status.ok()) ::_exit(10);
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{256 * 1024, 256 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    r.fill(2);
    snapshot_pieces<float>(r.pieces, w.buffer());
    w.start(2, Json::object(), Json::object(), false);
    std::optional<CheckpointWriter::Outcome> second = w.wait();
    if (!second || second->status.ok()) ::_exit(11);
    const std::string msg = second->status.error().message();
    if (msg.find(std::strerror(EFBIG)) == std::string::npos || msg.find(d.path.string()) == std::string::npos) {
      ::_exit(12);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "10: the first save failed, 11: the second did not, 12: its message";
  Result<std::optional<DistCheckpoint>> ck = open_latest_checkpoint(d.path.string(), false);
  ASSERT_TRUE(ck.ok() && ck->has_value());
  EXPECT_EQ((*ck)->step, 1);
  EXPECT_TRUE(tmp_dirs(d.path).empty());
}

TEST(Checkpoint, AnUnwritableDirectoryIsRefusedAtStart) {
  ScratchDir d("herd_unwritable");
  fs::create_directories(d.path);
  std::ofstream(d.path / "file") << "x";
  TrainConfig c = base_config((d.path / "file" / "ckpt").string(), 1, 1);
  Result<JobResult<float>> r = run(c);
  ASSERT_FALSE(r.ok());
  const std::string msg = r.error().message();
  EXPECT_NE(msg.find("checkpoint.dir"), std::string::npos) << msg;
  EXPECT_NE(msg.find((d.path / "file" / "ckpt").string()), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(Checkpoint, StaleTemporaryDirectoriesAreRemovedAtStart) {
  ScratchDir d("herd_stale");
  fs::create_directories(d.path / ".tmp-step_00000002");
  std::ofstream(d.path / ".tmp-step_00000002" / "rank_00000.bin") << "partial";
  TrainConfig c = base_config(d.path.string(), 1, 1);
  c.train.steps = 1;
  ASSERT_TRUE(run(c).ok());
  EXPECT_TRUE(tmp_dirs(d.path).empty());
}

TEST(Checkpoint, AsyncAndSyncSavesWriteIdenticalShardsAndRecordTheirCost) {
  ScratchDir a("herd_async"), s("herd_sync");
  TrainConfig c = base_config(a.path.string());
  c.train.steps = 4;
  c.train.metrics_file = (a.path.string() + ".metrics");
  ASSERT_TRUE(run(c).ok());
  c.checkpoint.dir = s.path.string();
  c.checkpoint.async = false;
  c.train.metrics_file = "";
  ASSERT_TRUE(run(c).ok());
  for (std::int64_t step : {2, 4}) {
    const fs::path da = a.path / step_dir_name(step), ds = s.path / step_dir_name(step);
    int files = 0;
    for (const auto& e : fs::directory_iterator(da)) {
      ++files;
      if (e.path().filename() != "manifest.json") {
        EXPECT_EQ(bytes_of(e.path()), bytes_of(ds / e.path().filename())) << e.path();
        continue;
      }
      // The manifests differ only in the resolved config they record (its checkpoint fields).
      Result<Json> ma = read_json_file(e.path().string()), ms = read_json_file((ds / "manifest.json").string());
      ASSERT_TRUE(ma.ok() && ms.ok());
      EXPECT_EQ((*ma)["meta"]["config"]["checkpoint"]["async"], true);
      EXPECT_EQ((*ms)["meta"]["config"]["checkpoint"]["async"], false);
      (*ma)["meta"].erase("config");
      (*ms)["meta"].erase("config");
      EXPECT_EQ(*ma, *ms);
    }
    EXPECT_EQ(files, 5);  // four shards and the manifest
  }
  const std::vector<Json> m = metrics_lines(a.path.string() + ".metrics");
  ASSERT_EQ(m.size(), 4u);
  EXPECT_FALSE(m[0].contains("checkpoint_s"));
  EXPECT_GE(m[1].value("checkpoint_s", -1.0), 0.0);
  EXPECT_GE(m[3].value("checkpoint_s", -1.0), 0.0);
  fs::remove(a.path.string() + ".metrics");
}

// The newest checkpoint with a flipped byte in one rank's shard, or a manifest field of the wrong type:
// with checkpoint.fallback every rank of a TP2 x DP2 job resumes from the previous one.
TEST(Checkpoint, FallbackOnACorruptNewestCheckpointInATp2Dp2Job) {
  for (bool manifest : {false, true}) {
    SCOPED_TRACE(manifest ? "manifest field" : "flipped byte");
    ScratchDir d("herd_fallback");
    TrainConfig c = base_config(d.path.string());
    c.train.steps = 4;
    ASSERT_TRUE(run(c).ok());
    const fs::path newest = d.path / step_dir_name(4);
    if (manifest) {
      Result<Json> j = read_json_file((newest / "manifest.json").string());
      ASSERT_TRUE(j.ok());
      (*j)["files"][1]["bytes"] = "many";
      std::ofstream(newest / "manifest.json") << j->dump();
    } else {
      std::vector<char> b = bytes_of(newest / "rank_00003.bin");
      b[b.size() / 2] ^= 0x01;
      std::ofstream(newest / "rank_00003.bin", std::ios::binary)
          .write(b.data(), static_cast<std::streamsize>(b.size()));
    }
    c.train.steps = 6;
    Result<JobResult<float>> refused = run(c);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().message().find('\n'), std::string::npos);
    c.checkpoint.fallback = true;
    Result<JobResult<float>> r = run(c);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->resumed_from, 2);
  }
}

// --- the NaN guard --------------------------------------------------------------------------------------

TEST(NanGuard, AnInjectedNanSkipsTheStepAndNamesStepAndGroup) {
  TrainConfig c = base_config("");
  c.train.steps = 3;
  c.fault.nan_step = 3;
  c.fault.nan_rank = 1;
  Result<JobResult<float>> r = run(c);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->history.size(), 3u);
  EXPECT_FALSE(r->history[1].skipped);
  EXPECT_TRUE(r->history[2].skipped);
  EXPECT_EQ(r->history[2].nonfinite, "attention");
  EXPECT_FALSE(std::isfinite(r->history[2].grad_norm));
  for (const auto& [name, w] : r->weights) {
    for (float x : w) ASSERT_TRUE(std::isfinite(x)) << name;
  }
  // Skipping changed nothing: the weights are those of the same run stopped after step 2.
  c.fault.nan_step = 0;
  Result<JobResult<float>> two = run(c, 2);
  ASSERT_TRUE(two.ok()) << two.error().message();
  expect_same_weights(*two, *r);
}

TEST(NanGuard, StopEndsTheJobWithoutACheckpointOfThatStep) {
  ScratchDir d("herd_nan_stop");
  TrainConfig c = base_config(d.path.string());
  c.train.nonfinite = "stop";
  c.fault.nan_step = 3;
  c.train.metrics_file = (d.path.string() + ".metrics");
  Result<JobResult<float>> r = run(c);
  ASSERT_FALSE(r.ok());
  const std::string msg = r.error().message();
  EXPECT_NE(msg.find("step 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("attention"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.nonfinite=stop"), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(d.path / step_dir_name(2)));
  EXPECT_EQ(list_checkpoints(d.path.string()).size(), 1u);
  EXPECT_TRUE(tmp_dirs(d.path).empty());
  fs::remove(c.train.metrics_file);

  // Skips are bounded: with none allowed in a row, the first one stops the job too.
  ScratchDir d2("herd_nan_bound");
  c.checkpoint.dir = d2.path.string();
  c.train.nonfinite = "skip";
  c.train.max_nonfinite_skips = 0;
  c.train.metrics_file = "";
  Result<JobResult<float>> bounded = run(c);
  ASSERT_FALSE(bounded.ok());
  EXPECT_NE(bounded.error().message().find("train.max_nonfinite_skips"), std::string::npos)
      << bounded.error().message();
}

TEST(NanGuard, TheMetricsFileMarksTheSkippedStepAndStaysValidJson) {
  ScratchDir d("herd_nan_metrics");
  fs::create_directories(d.path);
  TrainConfig c = base_config("", 1, 1);
  c.train.steps = 3;
  c.fault.nan_step = 2;
  c.train.metrics_file = (d.path / "m.jsonl").string();
  ASSERT_TRUE(run(c).ok());
  const std::vector<Json> m = metrics_lines(c.train.metrics_file);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_TRUE(m[1].value("skipped", false));
  EXPECT_NE(m[1].value("nonfinite", std::string()), "");
  EXPECT_TRUE(m[1]["grad_norm"].is_null());
  EXPECT_FALSE(m[2].contains("skipped"));
}

TEST(Config, FaultToleranceFieldsAreChecked) {
  TrainConfig c;
  c.checkpoint.on_error = "retry";
  Status s = validate(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("checkpoint.on_error"), std::string::npos);
  c = TrainConfig();
  c.train.nonfinite = "ignore";
  s = validate(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("train.nonfinite"), std::string::npos);
  c = TrainConfig();
  c.fault.nan_rank = 5;
  s = validate(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("fault.nan_rank"), std::string::npos);
}

}  // namespace
}  // namespace herd::train
