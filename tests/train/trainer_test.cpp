// The training loop end to end on a synthetic corpus, at one rank and at TP2 x DP2 (the same trainer):
// the loss falls and the held-out loss is reported, a run stopped at a random step and resumed from its
// checkpoint reproduces the uninterrupted run bit for bit (losses, evaluation losses, final weights,
// across the batch ramp's loader switch), corrupt or truncated checkpoints are refused with one line
// naming the file unless checkpoint.fallback, and a leftover temporary directory is never a checkpoint.
#include "herd/train/step/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/scratch_dir.h"
#include "common/test_model.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/generate.h"
#include "herd/train/job/job.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

// Documents with structure a model can learn: each token mostly follows from the previous one.
std::shared_ptr<const data::TokenDocuments> synthetic_docs(std::int64_t n_docs, std::uint32_t seed) {
  auto docs = std::make_shared<data::TokenDocuments>();
  docs->vocab_size = 64;
  std::mt19937 rng(seed);
  for (std::int64_t d = 0; d < n_docs; ++d) {
    std::vector<std::int32_t> ids;
    const int len = 8 + static_cast<int>(rng() % 40);
    std::int32_t t = static_cast<std::int32_t>(rng() % 64);
    for (int i = 0; i < len; ++i) {
      ids.push_back(t);
      t = (rng() % 8 == 0) ? static_cast<std::int32_t>(rng() % 64) : (t * 5 + 3) % 64;
    }
    docs->add_doc(ids);
  }
  return docs;
}

model::LlamaConfig test_model() { return herd::test_models::test_llama({}); }

TrainConfig test_config(const std::string& ckpt_dir) {
  TrainConfig c;
  c.data.seq_len = 32;
  c.train.steps = 10;
  c.train.global_batch = 8;
  c.parallel.microbatch = 2;  // M = 4 at dp 1
  c.optim.lr = 1e-2;
  c.schedule.warmup_steps = 2;
  c.schedule.ramp = true;  // exercise the loader switch across a resume
  c.schedule.ramp_tokens = 400;
  c.schedule.ramp_tokens2 = 800;
  c.eval.every = 3;
  c.eval.batches = 2;
  c.checkpoint.dir = ckpt_dir;
  c.checkpoint.every = 4;
  c.checkpoint.keep = 3;
  return c;
}

using herd::testing::ScratchDir;

// (tp, dp): one rank, and TP2 x DP2 as threads.
using TpDp = std::pair<int, int>;  // (tp, dp)
const TpDp kLayouts[] = {{1, 1}, {2, 2}};

std::string name(TpDp l) { return "tp" + std::to_string(l.first) + " dp" + std::to_string(l.second); }

Result<JobResult<float>> run(TrainConfig c, TpDp l, std::int64_t stop_after = 0, std::int64_t pp = 1,
                             const model::LlamaConfig& m = test_model()) {
  c.parallel.tp = l.first;
  c.parallel.dp = l.second;
  c.parallel.pp = pp;
  c.parallel.microbatch = 2 * 2 / l.second;  // global micro-batches of 4 sequences at any dp: M = 2
  c.train.global_batch = 8;
  JobResult<float> out;
  out.quiet = true;
  HERD_RETURN_IF_ERROR(
      run_local_job<float>(c, m, {synthetic_docs(60, 1), synthetic_docs(10, 2)}, &out, stop_after, /*gather=*/true));
  return out;
}

TEST(Trainer, LossFallsAndTheHeldOutLossIsReportedInEveryLayout) {
  for (TpDp l : kLayouts) {
    SCOPED_TRACE(name(l));
    TrainConfig c = test_config("");
    c.train.steps = 30;
    c.schedule.ramp = false;
    Result<JobResult<float>> r = run(c, l);
    ASSERT_TRUE(r.ok()) << r.error().message();
    const auto& h = r->history;
    ASSERT_EQ(h.size(), 30u);
    EXPECT_LT(h.back().loss, h.front().loss - 1.0);
    ASSERT_TRUE(h.back().val_loss.has_value());
    EXPECT_LT(*h.back().val_loss, std::log(64.0) - 1.0);
    EXPECT_TRUE(h[2].val_loss.has_value());  // eval.every = 3
    EXPECT_FALSE(h[3].val_loss.has_value());
    EXPECT_GT(h.back().mfu, 0.0);
  }
}

// Forward-only evaluation (no pipeline) and a pipeline's evaluation (its schedule at loss scale 0) agree
// with each other and across layouts, on the same held-out sequences.
TEST(Trainer, TheHeldOutLossIsTheSameInEveryLayout) {
  TrainConfig c = test_config("");
  c.train.steps = 4;
  c.schedule.ramp = false;
  c.eval.batches = 3;
  c.eval.every = 2;
  const model::LlamaConfig m = herd::test_models::test_llama({.layers = 4});
  Result<JobResult<float>> one = run(c, {1, 1}, 0, 1, m), four = run(c, {2, 2}, 0, 1, m),
                           pipe = run(c, {2, 1}, 0, 2, m);
  ASSERT_TRUE(one.ok()) << one.error().message();
  ASSERT_TRUE(four.ok()) << four.error().message();
  ASSERT_TRUE(pipe.ok()) << pipe.error().message();
  ASSERT_TRUE(one->history.back().val_loss && four->history.back().val_loss && pipe->history.back().val_loss);
  const double want = *one->history.back().val_loss;
  EXPECT_NEAR(*four->history.back().val_loss, want, 1e-5 * want);
  EXPECT_NEAR(*pipe->history.back().val_loss, want, 1e-5 * want);
  // Evaluation (at step 2) does not change training: the later losses are those of a run evaluating at
  // the end only, bit for bit, with and without a pipeline.
  c.eval.every = 0;
  for (auto [l, pp] : {std::pair{TpDp{1, 1}, 1}, {TpDp{2, 1}, 2}}) {
    Result<JobResult<float>> quiet_run = run(c, l, 0, pp, m);
    ASSERT_TRUE(quiet_run.ok()) << quiet_run.error().message();
    const JobResult<float>& evaluated = pp == 1 ? *one : *pipe;
    EXPECT_EQ(quiet_run->history.back().loss, evaluated.history.back().loss) << "pp " << pp;
  }
}

TEST(Trainer, ResumeAtARandomStepIsBitIdentical) {
  std::random_device rd;
  for (TpDp l : kLayouts) {
    ScratchDir a("herd_resume_a"), b("herd_resume_b");
    Result<JobResult<float>> full = run(test_config(a.path.string()), l);
    ASSERT_TRUE(full.ok()) << full.error().message();
    const std::int64_t stop = 1 + static_cast<std::int64_t>(rd() % 9);  // 1..9 of 10
    SCOPED_TRACE(name(l) + ", stopped after step " + std::to_string(stop));
    Result<JobResult<float>> first = run(test_config(b.path.string()), l, stop);
    ASSERT_TRUE(first.ok()) << first.error().message();
    EXPECT_EQ(static_cast<std::int64_t>(first->history.size()), stop);
    Result<JobResult<float>> second = run(test_config(b.path.string()), l);
    ASSERT_TRUE(second.ok()) << second.error().message();
    EXPECT_EQ(second->resumed_from, stop);

    const auto& want = full->history;
    const auto& got = second->history;
    ASSERT_EQ(got.size(), static_cast<std::size_t>(10 - stop));
    for (std::size_t i = 0; i < got.size(); ++i) {
      const StepRecord& w = want[static_cast<std::size_t>(stop) + i];
      EXPECT_EQ(got[i].step, w.step);
      EXPECT_EQ(got[i].loss, w.loss) << "step " << w.step;  // bit-identical, not approximately equal
      EXPECT_EQ(got[i].grad_norm, w.grad_norm) << "step " << w.step;
      EXPECT_EQ(got[i].tokens, w.tokens);
      EXPECT_EQ(got[i].val_loss.has_value(), w.val_loss.has_value());
      if (got[i].val_loss && w.val_loss) {
        EXPECT_EQ(*got[i].val_loss, *w.val_loss);
      }
    }
    ASSERT_EQ(full->weights.size(), second->weights.size());
    for (std::size_t i = 0; i < full->weights.size(); ++i) {
      EXPECT_EQ(full->weights[i].second, second->weights[i].second) << full->weights[i].first;
    }
  }
}

void corrupt(const fs::path& file, bool truncate) {
  std::vector<char> bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (truncate) {
    bytes.resize(bytes.size() / 2);
  } else {
    bytes[bytes.size() / 3] ^= 0x10;
  }
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(Trainer, CorruptOrTruncatedCheckpointIsRefusedNamingTheFileUnlessFallback) {
  for (TpDp l : kLayouts) {
    for (bool truncate : {false, true}) {
      SCOPED_TRACE(name(l) + (truncate ? ", truncated" : ", bit flip"));
      ScratchDir d(truncate ? "herd_truncated" : "herd_corrupt");
      TrainConfig c = test_config(d.path.string());
      c.train.steps = 8;  // checkpoints at 4 and 8
      ASSERT_TRUE(run(c, l).ok());
      const fs::path newest = d.path / step_dir_name(8);
      // One rank's shard of the newest checkpoint.
      const fs::path victim = newest / (l.first * l.second > 1 ? "rank_00002.bin" : "rank_00000.bin");
      ASSERT_TRUE(fs::exists(victim));
      corrupt(victim, truncate);
      c.train.steps = 10;
      Result<JobResult<float>> t = run(c, l);
      ASSERT_FALSE(t.ok());
      const std::string msg = t.error().message();
      EXPECT_NE(msg.find(victim.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find(truncate ? "truncated" : "checksum mismatch"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos);
      EXPECT_NE(msg.find("checkpoint.fallback"), std::string::npos) << msg;

      // Asked to, the trainer resumes from the previous good checkpoint; the corrupt one stays for inspection.
      c.checkpoint.fallback = true;
      Result<JobResult<float>> resumed = run(c, l);
      ASSERT_TRUE(resumed.ok()) << resumed.error().message();
      EXPECT_EQ(resumed->resumed_from, 4);
    }
  }
}

// The reference model `herd generate` loads from a checkpoint of any layout holds exactly the weights
// the run ended with (gathered from its ranks), tensor by tensor.
TEST(Checkpoint, GenerateLoadsEveryLayoutsWeightsExactly) {
  for (TpDp l : kLayouts) {
    SCOPED_TRACE(name(l));
    ScratchDir d("herd_generate_load");
    TrainConfig c = test_config(d.path.string());
    c.train.steps = 3;
    c.schedule.ramp = false;
    Result<JobResult<float>> r = run(c, l);
    ASSERT_TRUE(r.ok()) << r.error().message();
    Result<LoadedModel> lm = load_model(d.path.string());
    ASSERT_TRUE(lm.ok()) << lm.error().message();
    ASSERT_EQ(r->weights.size(), lm->model->named_params().size());
    for (const auto& [wname, w] : r->weights) {
      const nn::NamedParam& p = lm->model->param(wname);
      ASSERT_EQ(static_cast<std::int64_t>(w.size()), p.count()) << wname;
      EXPECT_TRUE(std::equal(w.begin(), w.end(), lm->model->params() + p.offset)) << wname;
    }
  }
}

TEST(Checkpoint, LeftoverTemporaryDirectoryIsNeverTakenForACheckpoint) {
  ScratchDir d("herd_partial");
  TrainConfig c = test_config(d.path.string());
  c.train.steps = 6;
  c.checkpoint.every = 2;
  c.checkpoint.keep = 2;  // steps 2, 4, 6 written; 2 pruned
  ASSERT_TRUE(run(c, {1, 1}).ok());
  EXPECT_EQ(list_checkpoints(d.path.string()).size(), 2u);
  EXPECT_FALSE(fs::exists(d.path / step_dir_name(2)));
  // A writer killed mid-save leaves its temporary directory, never a step_* one.
  fs::create_directories(d.path / ".tmp-step_00000008");
  std::ofstream(d.path / ".tmp-step_00000008" / "rank_00000.bin") << "par";
  Result<std::optional<DistCheckpoint>> ck = open_latest_checkpoint(d.path.string(), false);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  ASSERT_TRUE(ck->has_value());
  EXPECT_EQ((*ck)->step, 6);
}

TEST(Checkpoint, ManifestFieldsOfTheWrongTypeAreOneLineErrors) {
  ScratchDir d("herd_manifest");
  TrainConfig c = test_config(d.path.string());
  c.train.steps = 2;
  c.checkpoint.every = 2;
  ASSERT_TRUE(run(c, {1, 1}).ok());
  const fs::path manifest = d.path / step_dir_name(2) / "manifest.json";
  Result<Json> m = read_json_file(manifest.string());
  ASSERT_TRUE(m.ok());
  struct Case {
    std::function<void(Json&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["step"] = "two"; }, "step"},
      {[](Json& j) { j["files"] = 3; }, "files: expected an array"},
      {[](Json& j) { j["files"][0]["pieces"][0]["r1"] = 1e9; }, "does not fit"},
      {[](Json& j) { j["files"][0]["file"] = "../x.bin"; }, "not a file name inside the step directory"},
      {[](Json& j) { j["step"] = 3; }, "does not match its directory"},
  };
  for (const Case& k : cases) {
    Json edited = *m;
    k.edit(edited);
    std::ofstream(manifest) << edited.dump();
    Result<DistCheckpoint> ck = open_dist_checkpoint((d.path / step_dir_name(2)).string());
    ASSERT_FALSE(ck.ok()) << k.want;
    EXPECT_NE(ck.error().message().find(k.want), std::string::npos) << ck.error().message();
    EXPECT_EQ(ck.error().message().find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace herd::train
