// The training loop end to end on a synthetic corpus: the loss falls, a run stopped at a random step and
// resumed from its checkpoint reproduces the uninterrupted run bit for bit (losses, evaluation losses,
// final weights), and corrupt or truncated checkpoints are refused with one line naming the file.
#include "herd/train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "common/test_model.h"
#include "herd/train/checkpoint.h"

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
  c.train.micro_batch = 2;
  c.train.grad_accum = 2;
  c.optim.lr = 1e-2;
  c.schedule.warmup_steps = 2;
  c.schedule.ramp = true;  // exercise the loader switch across a resume
  c.schedule.ramp_tokens = 200;
  c.schedule.ramp_tokens2 = 400;
  c.eval.every = 3;
  c.eval.batches = 2;
  c.checkpoint.dir = ckpt_dir;
  c.checkpoint.every = 4;
  c.checkpoint.keep = 3;
  return c;
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / (name + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::unique_ptr<Trainer> make(const TrainConfig& c) {
  Result<std::unique_ptr<Trainer>> t = Trainer::make(c, test_model(), synthetic_docs(60, 1), synthetic_docs(10, 2));
  HERD_CHECK(t.ok(), t.error().message());
  (*t)->quiet = true;
  return std::move(*t);
}

TEST(Trainer, LossFalls) {
  TrainConfig c = test_config("");
  c.train.steps = 30;
  c.schedule.ramp = false;
  auto t = make(c);
  ASSERT_TRUE(t->run().ok());
  const auto& h = t->history();
  ASSERT_EQ(h.size(), 30u);
  EXPECT_LT(h.back().loss, h.front().loss - 1.0);
  ASSERT_TRUE(h.back().val_loss.has_value());
  EXPECT_LT(*h.back().val_loss, std::log(64.0) - 1.0);
}

TEST(Trainer, ResumeAtARandomStepIsBitIdentical) {
  TempDir a("herd_resume_a"), b("herd_resume_b");
  auto full = make(test_config(a.path.string()));
  ASSERT_TRUE(full->run().ok());

  std::random_device rd;
  const std::int64_t stop = 1 + static_cast<std::int64_t>(rd() % 9);  // 1..9 of 10
  SCOPED_TRACE("stopped after step " + std::to_string(stop));
  {
    auto first = make(test_config(b.path.string()));
    ASSERT_TRUE(first->run(stop).ok());
    EXPECT_EQ(first->step(), stop);
  }
  auto second = make(test_config(b.path.string()));
  EXPECT_EQ(second->resumed_from(), stop);
  ASSERT_TRUE(second->run().ok());

  const auto& want = full->history();
  const auto& got = second->history();
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
  const std::int64_t n = full->model().param_count();
  EXPECT_EQ(0, std::memcmp(full->model().params(), second->model().params(), sizeof(float) * n));
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

TEST(Trainer, CorruptOrTruncatedCheckpointIsRefusedNamingTheFile) {
  for (bool truncate : {false, true}) {
    SCOPED_TRACE(truncate ? "truncated" : "bit flip");
    TempDir d(truncate ? "herd_truncated" : "herd_corrupt");
    TrainConfig c = test_config(d.path.string());
    c.train.steps = 8;  // checkpoints at 4 and 8
    ASSERT_TRUE(make(c)->run().ok());
    const fs::path newest = d.path / step_dir_name(8);
    const fs::path victim = newest / (truncate ? "adam_v.bin" : "params.bin");
    ASSERT_TRUE(fs::exists(victim));
    corrupt(victim, truncate);
    Result<std::unique_ptr<Trainer>> t = Trainer::make(c, test_model(), synthetic_docs(60, 1), synthetic_docs(10, 2));
    ASSERT_FALSE(t.ok());
    const std::string msg = t.error().message();
    EXPECT_NE(msg.find(victim.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(truncate ? "truncated" : "checksum mismatch"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    EXPECT_NE(msg.find("checkpoint.fallback"), std::string::npos) << msg;

    // Asked to, the trainer resumes from the previous good checkpoint; the corrupt one stays for inspection.
    c.checkpoint.fallback = true;
    auto resumed = make(c);
    EXPECT_EQ(resumed->resumed_from(), 4);
    EXPECT_TRUE(fs::exists(newest));
  }
}

TEST(Checkpoint, LeftoverTemporaryDirectoryIsNeverTakenForACheckpoint) {
  TempDir d("herd_partial");
  const std::vector<float> w = {1, 2, 3};
  ASSERT_TRUE(save_checkpoint(d.path.string(), 5, Json::object(), {{"params", w.data(), 12}}, 2).ok());
  // A writer killed mid-save leaves its temporary directory, never a step_* one.
  fs::create_directories(d.path / ".tmp-step_00000006-999");
  std::ofstream(d.path / ".tmp-step_00000006-999" / "params.bin") << "par";
  Result<LoadedCheckpoint> ck = load_latest(d.path.string(), false);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_EQ(ck->step, 5);
  // keep = 2: the third save removes the oldest.
  ASSERT_TRUE(save_checkpoint(d.path.string(), 6, Json::object(), {{"params", w.data(), 12}}, 2).ok());
  ASSERT_TRUE(save_checkpoint(d.path.string(), 7, Json::object(), {{"params", w.data(), 12}}, 2).ok());
  EXPECT_EQ(list_checkpoints(d.path.string()).size(), 2u);
  EXPECT_FALSE(fs::exists(d.path / step_dir_name(5)));
  // Re-saving an existing step replaces it whole.
  const std::vector<float> w2 = {4, 5, 6};
  ASSERT_TRUE(save_checkpoint(d.path.string(), 7, Json::object(), {{"params", w2.data(), 12}}, 2).ok());
  Result<LoadedCheckpoint> again = load_latest(d.path.string(), false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(0, std::memcmp((*again->get("params", 12))->data(), w2.data(), 12));
}

}  // namespace
}  // namespace herd::train
