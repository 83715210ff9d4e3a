// A checkpoint resumes only into the model and the data it was trained on: a run whose model (layers,
// sizes, heads, vocabulary, RoPE, norm), sequence length or training split differs from what the
// checkpoint's manifest records is refused with one line naming the field, both values and the fix, and
// writes nothing. The layout (tp, cp, pp, dp) stays free.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_runner.h"
#include "herd/data/shard.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "train/dist_harness.h"
#include "train/parity_run_dir.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

class ResumeCli : public herd::testing::ParityRunDir {
 protected:
  ResumeCli() : ParityRunDir("herd_resume_cli") {}

  // A run of the parity data on the model config `model` into checkpoint.dir dir_/ck.
  std::string args(const fs::path& model, int steps, const std::string& extra = "") {
    return "train --data.dir=" + dir_.string() + " --model.name=" + model.string() +
           " --data.seq_len=16 --train.global_batch=8 --parallel.microbatch_size=2 --optim.lr=1e-2 --eval.every=0"
           " --generate.samples=0 --checkpoint.every=2 --train.steps=" +
           std::to_string(steps) + " --checkpoint.dir=" + (dir_ / "ck").string() + " " + extra;
  }
  fs::path write_model(const std::string& name, const model::LlamaConfig& m) {
    const fs::path p = dir_ / name;
    std::ofstream(p.string()) << model::config_to_hf_json(m).dump();
    return p;
  }
};

TEST_F(ResumeCli, AnotherModelSequenceLengthOrDatasetIsRefusedAndTheLayoutStaysFree) {
  const fs::path four = write_model("four_layers.json", testing::parity_model(4));
  auto r = herd::testing::run_herd(args(four, 4, "--train.metrics_file=" + (dir_ / "first.jsonl").string()));
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> saved = list_checkpoints((dir_ / "ck").string());
  ASSERT_FALSE(saved.empty());
  const std::string ck = (dir_ / "ck").string();

  auto refused = [&](const std::string& run, std::initializer_list<std::string> parts) {
    SCOPED_TRACE(run);
    const fs::path metrics = dir_ / "refused.jsonl";
    const auto res = herd::testing::run_herd(run + " --train.metrics_file=" + metrics.string());
    EXPECT_EQ(res.status, 1) << res.err;
    const std::size_t at = res.err.find("herd train: error: ");
    ASSERT_NE(at, std::string::npos) << res.err;
    const std::string line = res.err.substr(at, res.err.find('\n', at) - at);
    EXPECT_NE(line.find("checkpoint.dir '" + ck + "'"), std::string::npos) << line;
    for (const std::string& p : parts) EXPECT_NE(line.find(p), std::string::npos) << line;
    EXPECT_FALSE(fs::exists(metrics));
    EXPECT_EQ(list_checkpoints(ck), saved);
  };
  // Half the layers: the other layers' weights would be dropped.
  refused(args(write_model("two_layers.json", testing::parity_model(2)), 8),
          {"num_hidden_layers 4 vs 2", "model.name=" + four.string(), "choose another checkpoint.dir"});
  model::LlamaConfig wider = testing::parity_model(4);
  wider.n_kv_heads = 8;
  refused(args(write_model("kv8.json", wider), 8), {"num_key_value_heads 4 vs 8"});
  model::LlamaConfig theta = testing::parity_model(4);
  theta.rope_theta = 123456;
  refused(args(write_model("theta.json", theta), 8), {"rope_theta"});
  refused(args(four, 8, "--data.seq_len=8"), {"data.seq_len 16 vs 8"});
  // Another training split (other documents) in data.dir.
  const fs::path other = dir_ / "other";
  fs::create_directories(other);
  ASSERT_TRUE(data::write_shard((other / "train-00000.bin").string(), *testing::parity_docs(30, 7)).ok());
  refused(args(four, 8, "--data.dir=" + other.string()), {"training split", "40 documents", "30 documents"});

  // The same model and data on another layout resume.
  r = herd::testing::run_herd(args(four, 8, "--dp 2 --train.metrics_file=" + (dir_ / "second.jsonl").string()));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("resumed from"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace herd::train
