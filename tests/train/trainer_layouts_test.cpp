// The trainer's plumbing on the local backend (the loss and weight parity of every layout is
// dist_parity_test.cpp and dist_4d_parity_test.cpp): a checkpoint
// written at TP2 x DP2 resumes at TP1 x DP4 and TP4 x DP1 onto the uninterrupted curve, bad layouts are
// refused before any rank starts, and a stalled or dead rank stops the job with an error naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/scratch_dir.h"
#include "herd/comm/trace_analysis.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/step/trainer.h"
#include "train/dist_harness.h"
#include "train/parity_layout.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;
using testing::parity_config;
using testing::parity_docs;
using testing::parity_model;

using herd::testing::ScratchDir;

TEST(TrainerLayouts, CheckpointAtTp2Dp2ResumesInOtherLayouts) {
  TrainConfig c = parity_config(10);
  const auto ref = testing::reference_run<double>(c, parity_model(), parity_docs(80, 7));
  for (auto [tp, dp] : {std::pair{1, 4}, {4, 1}}) {
    ScratchDir dir("herd_dist_ckpt");
    c.checkpoint.dir = dir.path.string();
    testing::run_parity_layout<double>(c, 2, 2, 5);
    Result<DistCheckpoint> ck = open_checkpoint(c.checkpoint.dir);
    ASSERT_TRUE(ck.ok()) << ck.error().message();
    EXPECT_EQ(ck->step, 5);
    EXPECT_EQ(ck->manifest["files"].size(), 4u);
    const JobResult<double> rest = testing::run_parity_layout<double>(c, tp, dp);
    ASSERT_EQ(rest.history.size(), 5u);
    for (std::size_t i = 0; i < 5; ++i) {
      EXPECT_LE(std::fabs(rest.history[i].loss - ref.losses[5 + i]) / ref.losses[5 + i], 1e-10)
          << "tp" << tp << " dp" << dp << " step " << 6 + i;
    }
    for (std::size_t i = 0; i < ref.weights.size(); ++i) {
      EXPECT_LE(testing::rel_diff(rest.weights[i].second, ref.weights[i].second), 1e-10) << ref.weights[i].first;
    }
  }
}

TEST(TrainerLayouts, CorruptShardIsRefusedNamingTheFile) {
  ScratchDir dir("herd_dist_corrupt");
  TrainConfig c = parity_config(2);
  c.checkpoint.dir = dir.path.string();
  testing::run_parity_layout<double>(c, 1, 2);
  const std::vector<std::string> all = list_checkpoints(c.checkpoint.dir);
  ASSERT_FALSE(all.empty());
  const std::string latest = all.front();
  {
    std::fstream f(fs::path(latest) / "rank_00001.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  Result<DistCheckpoint> ck = open_dist_checkpoint(latest);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.error().message().find("rank_00001.bin: checksum mismatch"), std::string::npos) << ck.error().message();
}

// The bytes a load uses are the bytes it checked: a shard that changes after the checkpoint was opened
// (and verified) is refused by load_into, naming the file and both checksums.
TEST(TrainerLayouts, AShardChangedAfterTheCheckpointWasOpenedIsRefusedWhenLoaded) {
  ScratchDir dir("herd_dist_changed");
  TrainConfig c = parity_config(2);
  c.checkpoint.dir = dir.path.string();
  testing::run_parity_layout<double>(c, 1, 2);
  const std::string latest = list_checkpoints(c.checkpoint.dir).front();
  Result<DistCheckpoint> ck = open_dist_checkpoint(latest);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  // Every tensor whole, as `herd generate` loads it.
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> shapes;
  for (const Json& f : ck->manifest["files"]) {
    for (const Json& p : f["pieces"])
      shapes[p["name"].get<std::string>()] = {p["rows"].get<std::int64_t>(), p["cols"].get<std::int64_t>()};
  }
  std::vector<std::vector<double>> buffers;
  std::vector<parallel::ShardPiece<double>> pieces;
  for (const auto& [name, rc] : shapes) {
    parallel::ShardPiece<double> p;
    p.name = name;
    p.rows = p.r1 = rc.first;
    p.cols = p.c1 = rc.second;
    p.e1 = rc.first * rc.second;
    for (double** dst : {&p.param, &p.m, &p.v}) {
      buffers.emplace_back(static_cast<std::size_t>(p.e1));
      *dst = buffers.back().data();
    }
    pieces.push_back(p);
  }
  ASSERT_TRUE(ck->load_into<double>(pieces).ok());
  {
    std::fstream f(fs::path(latest) / "rank_00001.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const Status s = ck->load_into<double>(pieces);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("rank_00001.bin: checksum mismatch (the manifest says "), std::string::npos)
      << s.error().message();
}

TEST(TrainerLayouts, BadLayoutsAreRefusedWithTheNumbers) {
  const model::LlamaConfig m = parity_model();  // 8 heads, 4 KV heads, vocab 64, batch 4
  auto err = [&](std::int64_t tp, std::int64_t dp, std::int64_t world) {
    TrainConfig c = parity_config();
    c.parallel.tp = tp;
    c.parallel.dp = dp;
    c.parallel.microbatch = 0;
    const Result<JobLayout> s = check_layout(c, m, world);
    return s.ok() ? std::string() : s.error().message();
  };
  EXPECT_NE(err(3, 1, 3).find("num_attention_heads (8) is not divisible by tp (3)"), std::string::npos) << err(3, 1, 3);
  EXPECT_NE(err(8, 1, 8).find("num_key_value_heads (4) is not divisible by tp (8)"), std::string::npos) << err(8, 1, 8);
  EXPECT_NE(err(1, 3, 3).find("train.global_batch (8 sequences) is not divisible by parallel.dp (3)"),
            std::string::npos)
      << err(1, 3, 3);
  EXPECT_NE(err(2, 2, 8).find("= 4 ranks, but the job has 8"), std::string::npos) << err(2, 2, 8);
  model::LlamaConfig odd_vocab = m;
  odd_vocab.vocab = 66;
  TrainConfig c = parity_config();
  c.parallel.tp = 4;
  EXPECT_NE(check_layout(c, odd_vocab, 4).error().message().find("vocab_size (66) is not divisible by tp (4)"),
            std::string::npos);
  EXPECT_TRUE(check_layout(c, m, 4).ok());
  // Under sequence parallelism tp divides the CP-local sequence; without it, it need not.
  c.data.seq_len = 6;
  EXPECT_NE(check_layout(c, m, 4).error().message().find("seq_len / cp (6 / 1 = 6) is not divisible by tp (4)"),
            std::string::npos);
  c.parallel.sequence_parallel = false;
  EXPECT_TRUE(check_layout(c, m, 4).ok()) << check_layout(c, m, 4).error().message();
  c.parallel.sequence_parallel = true;
  c.data.seq_len = parity_config().data.seq_len;
  // The launcher refuses before starting threads (no rank runs, so no flight recorder is dumped).
  c.parallel.tp = 3;
  JobResult<double> out;
  Status s = run_local_job<double>(c, m, {parity_docs(10, 1), nullptr}, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(out.dump_paths.empty());
}

TEST(TrainerLayouts, AStalledRankStopsTheJobNamingIt) {
  herd::testing::ScratchDir dumps("herd_stalled_rank_dumps");
  TrainConfig c = parity_config(4);
  testing::set_layout(c, 2, 1, 1, 2);
  c.parallel.comm_timeout_s = 2;  // headroom for a loaded (or sanitized) machine
  c.fault.hang_rank = 3;
  c.fault.hang_step = 2;
  c.fault.hang_seconds = 6;
  c.diagnostics.dir = dumps.path.string();
  JobResult<double> out;
  Status s = run_local_job<double>(c, parity_model(), {parity_docs(40, 3), nullptr}, &out);
  ASSERT_FALSE(s.ok());
  const std::string msg = s.error().message();
  EXPECT_NE(msg.find("timeout"), std::string::npos) << msg;
  EXPECT_NE(msg.find("flight recorders dumped"), std::string::npos) << msg;
  ASSERT_FALSE(out.dump_paths.empty());
  // Which rank's timeout comes first depends on the scheduler (rank 3's partners wait on it, and their
  // own partners on them); the dumps, read across ranks, name rank 3 whatever the order.
  Result<comm::JobDumps> read = comm::read_job_dumps(dumps.path.string(), "");
  ASSERT_TRUE(read.ok()) << read.error().message();
  const comm::TraceReport rep = comm::analyze_dumps(read->ranks, read->job);
  EXPECT_EQ(rep.culprit_ranks, (std::vector<int>{3})) << msg;
}

TEST(TrainerLayouts, ADeadRankStopsTheJob) {
  TrainConfig c = parity_config(4);
  testing::set_layout(c, 1, 1, 1, 2);
  c.parallel.comm_timeout_s = 5;
  c.fault.kill_rank = 1;
  c.fault.kill_step = 3;
  JobResult<double> out;
  Status s = run_local_job<double>(c, parity_model(), {parity_docs(40, 3), nullptr}, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("global ranks 1 exited"), std::string::npos) << s.error().message();
  for (const std::string& p : out.dump_paths) fs::remove(p);
}

}  // namespace
}  // namespace herd::train
