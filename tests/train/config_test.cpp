// Typed configuration: file + overrides, one-line errors naming the key, and the LR / batch schedules.
#include "herd/train/job/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "herd/core/json_text.h"
#include "herd/train/job/job.h"
#include "herd/train/step/lr_schedule.h"
#include "herd/train/step/trainer.h"

namespace herd::train {
namespace {

TEST(Config, FileThenOverridesInOrder) {
  const std::string path = std::filesystem::temp_directory_path() / "herd_cfg_test.json";
  std::ofstream(path) << R"({"optim": {"lr": 0.01}, "train": {"steps": 7, "metrics_file": "m.jsonl"}})";
  Result<TrainConfig> c =
      load_config(path, {"--optim.lr=2e-3", "parallel.recompute=selective", "--schedule.ramp=true"});
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_DOUBLE_EQ(c->optim.lr, 2e-3);
  EXPECT_EQ(c->train.steps, 7);
  EXPECT_EQ(c->train.metrics_file, "m.jsonl");
  EXPECT_EQ(c->parallel.recompute, model::Recompute::kSelective);
  EXPECT_TRUE(c->schedule.ramp);
  // The resolved config round-trips through its JSON form, and every registered field has a doc line.
  TrainConfig back;
  ASSERT_TRUE(apply_json(back, to_json(*c), "").ok());
  EXPECT_EQ(to_json(back), to_json(*c));
  for (const FieldInfo& f : describe(*c)) EXPECT_FALSE(f.doc.empty()) << f.key;
  std::filesystem::remove(path);
}

TEST(Config, UnknownKeysAndBadValuesAreOneLineErrorsNamingTheKey) {
  const std::string path = std::filesystem::temp_directory_path() / "herd_cfg_bad.json";
  std::ofstream(path) << R"({"optim": {"lrr": 0.01}})";
  Result<TrainConfig> c = load_config(path, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find(path), std::string::npos);
  EXPECT_NE(c.error().message().find("unknown key 'optim.lrr'"), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("lr, min_lr_ratio"), std::string::npos) << c.error().message();

  std::ofstream(path) << R"({"optimizer": {"lr": 0.01}})";
  c = load_config(path, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("unknown section 'optimizer'"), std::string::npos) << c.error().message();

  std::ofstream(path) << R"({"train": {"steps": "many"}})";
  c = load_config(path, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("train.steps: expected an integer, got \"many\""), std::string::npos)
      << c.error().message();
  std::filesystem::remove(path);

  struct Case {
    std::string arg, want;
  };
  for (const Case& k : std::vector<Case>{{"--optim.lr=fast", "--optim.lr: expected a number, got \"fast\""},
                                         {"--train.stepz=3", "unknown key 'train.stepz'"},
                                         {"--optim.lr", "expected --section.field=value"},
                                         {"--optim.lr=-1", "optim.lr: must be positive, got -1"},
                                         {"--parallel.recompute=some", "parallel.recompute"},
                                         {"--train.micro_batch=4", "train.micro_batch was the global sequences"},
                                         {"--parallel.pp_n=2", "parallel.pp_n is now parallel.n"},
                                         {"--fault.kill_rank=1", "fault.kill_rank (1) is not a rank of the 1-rank job"},
                                         {"--checkpoint.keep=0", "checkpoint.keep: must be positive"}}) {
    Result<TrainConfig> r = load_config("", {k.arg});
    ASSERT_FALSE(r.ok()) << k.arg;
    EXPECT_NE(r.error().message().find(k.want), std::string::npos) << r.error().message();
    EXPECT_EQ(r.error().message().find('\n'), std::string::npos);
  }
}

// The settings that were environment variables (HERD_COMM_*, HERD_CLUSTER_FILE, HERD_BACKGROUND_JOBS)
// are fields: set by override, validated with the field's name, and the communicator's options come
// from them.
TEST(Config, CommAndProjectionFieldsReachTheCommunicatorOptions) {
  const TrainConfig defaults;
  const comm::CommOptions d = comm_options(defaults);
  EXPECT_EQ(d.timeout_s, 0.0);  // fitted to the run (train/job/watchdog.h)
  EXPECT_TRUE(d.deterministic);
  EXPECT_EQ(d.dump_dir, std::filesystem::temp_directory_path().string());  // no checkpoint or metrics dir
  EXPECT_EQ(d.job_id, "");
  EXPECT_EQ(d.recorder_capacity, 2048u);
  Result<TrainConfig> c = load_config(
      "", {"--parallel.comm_timeout_s=2.5", "--comm.deterministic=false", "--diagnostics.dir=/tmp/d",
           "--comm.recorder_size=16", "--projection.cluster_file=cal.json", "--projection.background_jobs=0"});
  ASSERT_TRUE(c.ok()) << c.error().message();
  const comm::CommOptions o = comm_options(*c);
  EXPECT_EQ(o.timeout_s, 2.5);
  EXPECT_FALSE(o.deterministic);
  EXPECT_EQ(o.dump_dir, "/tmp/d");
  EXPECT_EQ(o.recorder_capacity, 16u);
  EXPECT_EQ(c->projection.cluster_file, "cal.json");
  EXPECT_EQ(c->projection.background_jobs, 0.0);
  EXPECT_EQ(defaults.projection.background_jobs, -1.0);  // measured by default
  struct Case {
    std::string arg, want;
  };
  for (const Case& k : std::vector<Case>{
           {"--comm.deterministic=maybe", "--comm.deterministic: expected true or false, got \"maybe\""},
           {"--comm.recorder_size=0", "comm.recorder_size: must be positive, got 0"},
           {"--projection.background_jobs=-2", "projection.background_jobs: must be >= 0, or -1 to measure, got -2"},
           {"--parallel.comm_timeout_s=-1", "parallel.comm_timeout_s: must be >= 0 (0: fitted to the run), got -1"},
           {"--comm.dump_dir=/tmp/d", "comm.dump_dir is now diagnostics.dir"},
           {"--diagnostics.job_id=a/b", "diagnostics.job_id 'a/b': use letters, digits"},
           {"--fault.slow_factor=0.5", "fault.slow_factor: must be >= 1"},
           {"--fault.slow_mode=nap", "fault.slow_mode: 'nap' is unknown; use compute or stall"},
           {"--diagnostics.straggler_threshold=1", "diagnostics.straggler_threshold: must be a finite factor above 1"},
           {"--diagnostics.straggler_stall_threshold=0.5",
            "diagnostics.straggler_stall_threshold: must be a finite factor above 1"},
           {"--fault.kill_every=-1", "fault.kill_every: must be >= 0"},
           {"--fault.max_restarts=-1", "fault.max_restarts: must be >= 0"},
           {"--fault.restart_backoff_s=-1", "fault.restart_backoff_s: must be >= 0"},
           {"--fault.slow_rank=5", "fault.slow_rank (5) is not a rank of the 1-rank job"}}) {
    Result<TrainConfig> r = load_config("", {k.arg});
    ASSERT_FALSE(r.ok()) << k.arg;
    EXPECT_NE(r.error().message().find(k.want), std::string::npos) << r.error().message();
  }
}

// diagnostics.dir defaults inside the run's directory: the checkpoints', else the metrics file's.
// Found by the train_config fuzzer: an override value that is not UTF-8 aborted herd (the error message's
// preview of the value threw). Now it is the usual one-line error naming the key.
TEST(Config, AnOverrideThatIsNotUtf8IsAnErrorNamingTheKey) {
  TrainConfig c;
  const Status s = apply_override(c, std::string("--optim.lr=\xff") + "e-3");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("optim.lr"), std::string::npos) << s.error().message();
  EXPECT_EQ(s.error().message().find('\n'), std::string::npos);
  // A non-UTF-8 path is kept as given, and the config still prints as JSON.
  ASSERT_TRUE(apply_override(c, std::string("--data.dir=/runs/caf\xe9")).ok());
  EXPECT_EQ(c.data.dir, "/runs/caf\xe9");
  EXPECT_NE(json_text(to_json(c)).find("/runs/caf"), std::string::npos);
}

TEST(Config, DiagnosticsDirDefaultsInsideTheRun) {
  TrainConfig c;
  c.train.metrics_file = "/runs/a/metrics.jsonl";
  EXPECT_EQ(diagnostics_dir(c), "/runs/a");
  c.checkpoint.dir = "/runs/a/ckpt";
  EXPECT_EQ(diagnostics_dir(c), "/runs/a/ckpt/diagnostics");
  c.diagnostics.dir = "/elsewhere";
  EXPECT_EQ(diagnostics_dir(c), "/elsewhere");
  EXPECT_EQ(comm_options(c).dump_dir, "/elsewhere");
}

TEST(Config, SequenceLongerThanTheModelAllowsNamesTheField) {
  Result<TrainConfig> c = load_config("", {"--model.name=tiny", "--data.seq_len=4096"});
  ASSERT_TRUE(c.ok());
  Result<model::LlamaConfig> m = resolve_model_config(*c, 8192);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("data.seq_len (4096) is longer than model 'tiny' allows (1024)"),
            std::string::npos)
      << m.error().message();
  Result<TrainConfig> small_vocab = load_config("", {"--model.vocab=100"});
  ASSERT_TRUE(small_vocab.ok());
  m = resolve_model_config(*small_vocab, 8192);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("model.vocab (100)"), std::string::npos);
}

// The layout resolves as the planner's does: M = global_batch / (dp x microbatch), N = min(pp, M), and
// the micro-batch size by default M = pp (1 without a pipeline).
TEST(Config, LayoutResolvesWithThePlannersDefaults) {
  Result<TrainConfig> c = load_config("", {"--train.global_batch=16", "--parallel.dp=2"});
  ASSERT_TRUE(c.ok());
  Result<ResolvedLayout> r = resolve_layout(*c);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->layout.microbatch, 8);
  EXPECT_EQ(r->microbatches, 1);
  c = load_config("", {"--train.global_batch=16", "--parallel.pp=4", "--parallel.dp=2"});
  r = resolve_layout(*c);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->layout.microbatch, 2);
  EXPECT_EQ(r->microbatches, 4);
  EXPECT_EQ(r->layout.n, 4);
  c = load_config("", {"--train.global_batch=16", "--parallel.pp=4", "--parallel.microbatch_size=4"});
  r = resolve_layout(*c);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->microbatches, 4);
  c = load_config("", {"--train.global_batch=16", "--parallel.pp=4", "--parallel.microbatch_size=8"});
  r = resolve_layout(*c);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->microbatches, 2);
  EXPECT_EQ(r->layout.n, 2);  // min(pp, M), as herd estimate's default
  c = load_config("", {"--train.global_batch=16", "--parallel.microbatch_size=3"});
  r = resolve_layout(*c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("parallel.microbatch_size (3)"), std::string::npos) << r.error().message();
  c = load_config("", {"--train.global_batch=16", "--parallel.microbatch_size=4", "--parallel.n=5"});
  r = resolve_layout(*c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("parallel.n (5) must be at most M = 4"), std::string::npos) << r.error().message();
}

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  const LrSchedule s{1e-3, 0.01, 10, 90};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);                    // the last warm-up step reaches the peak
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);                   // cosine starts at the peak
  EXPECT_NEAR(s.at(55), 0.5 * (1e-3 + 1e-5), 1e-12);  // halfway down
  EXPECT_DOUBLE_EQ(s.at(100), 1e-5);
  EXPECT_DOUBLE_EQ(s.at(1000), 1e-5);
  for (std::int64_t t = 10; t < 100; ++t) EXPECT_LE(s.at(t + 1), s.at(t));
}

TEST(BatchRamp, FollowsThePapersStages) {
  const BatchRamp r{true, 8, 256, 1000, 5000};
  EXPECT_EQ(r.at(0).micro_batch, 4);
  EXPECT_EQ(r.at(0).seq_len, 128);  // a quarter of the tokens per batch: half the sequences at half length
  EXPECT_EQ(r.at(1000).micro_batch, 4);
  EXPECT_EQ(r.at(1000).seq_len, 256);
  EXPECT_EQ(r.at(5000).micro_batch, 8);
  const BatchRamp off{false, 8, 256, 1000, 5000};
  EXPECT_EQ(off.at(0).micro_batch, 8);
}

}  // namespace
}  // namespace herd::train

namespace herd::train {
namespace {

// Every bundled config (the README's and the demo's) loads, validates, and its layout is one the
// runtime accepts before any rank starts: a config that drifted from the code fails here, not in the demo.
TEST(Config, EveryBundledConfigIsAValidJob) {
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(HERD_SOURCE_DIR) / "configs")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    ++seen;
    Result<TrainConfig> c = load_config(e.path().string(), {});
    ASSERT_TRUE(c.ok()) << c.error().message();
    ASSERT_TRUE(validate(*c).ok()) << validate(*c).error().message();
    Result<model::LlamaConfig> m = resolve_model_config(*c, 8192);  // the demo tokenizer's vocabulary
    ASSERT_TRUE(m.ok()) << m.error().message();
    const Result<JobLayout> layout = check_layout(*c, *m, c->parallel.world());
    EXPECT_TRUE(layout.ok()) << layout.error().message();
  }
  EXPECT_GE(seen, 3);
}

}  // namespace
}  // namespace herd::train
