// `herd data` end to end through the binary: shards that decode back to the corpus documents with
// BOS/EOS, a deterministic held-out split, `verify`, `train-tokenizer`, and one-line errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <set>

#include "cli/cli_runner.h"
#include "data/test_paths.h"
#include "herd/core/json.h"
#include "herd/data/corpus.h"
#include "herd/data/loader.h"
#include "herd/data/shard.h"
#include "herd/data/tokenizer.h"

namespace herd::data {
namespace {

auto run(const std::string& args) { return herd::testing::run_herd_combined(args); }

// A small JSONL corpus with ASCII, accents and an empty document.
std::string write_corpus(const std::filesystem::path& dir, std::vector<std::string>& docs) {
  docs.clear();
  for (int i = 0; i < 20; ++i)
    docs.push_back("Document " + std::to_string(i) + ": caf\u00e9 and more words, x" + std::to_string(i * i));
  docs.push_back("");
  const std::string path = (dir / "c.jsonl").string();
  std::ofstream out(path);
  for (const auto& d : docs) out << Json{{"id", 1}, {"text", d}}.dump() << "\n";
  return path;
}

TEST(DataCli, ShardsDecodeBackToTheDocumentsWithAHeldOutSplit) {
  const auto dir = testing::temp_dir("cli");
  std::vector<std::string> docs;
  const std::string corpus = write_corpus(dir, docs);
  // A trained tokenizer (no licence-bound file needed), then shards.
  const std::string tok_path = (dir / "tok.model").string();
  herd::testing::CliResult t = run("data train-tokenizer --input " + corpus + " --vocab-size 300 --output " + tok_path);
  ASSERT_EQ(t.status, 0) << t.out;
  auto tok = Tokenizer::load(tok_path);
  ASSERT_TRUE(tok.ok()) << tok.error().message();
  ASSERT_EQ(tok->vocab_size(), 300);
  const std::string out = (dir / "shards").string();
  herd::testing::CliResult d =
      run("data --input " + corpus + " --tokenizer " + tok_path + " --output " + out + " --val-fraction 0.2 --seed 3");
  ASSERT_EQ(d.status, 0) << d.out;
  auto train = read_split(out, "train");
  auto val = read_split(out, "val");
  ASSERT_TRUE(train.ok() && val.ok());
  EXPECT_EQ(val->n_docs(), 4);  // round(0.2 x 21)
  EXPECT_EQ(train->n_docs() + val->n_docs(), 21);
  std::multiset<std::string> want(docs.begin(), docs.end()), got;
  for (const TokenDocuments* split : {&*train, &*val}) {
    EXPECT_EQ(split->vocab_size, 300);
    for (std::int64_t i = 0; i < split->n_docs(); ++i) {
      const auto ids = split->doc(i);
      ASSERT_GE(ids.size(), 2u);
      EXPECT_EQ(ids.front(), tok->bos_id());
      EXPECT_EQ(ids.back(), tok->eos_id());
      got.insert(*tok->decode(ids.subspan(1, ids.size() - 2)));
    }
  }
  EXPECT_EQ(got, want);
  auto meta = read_json_file(out + "/meta.json");
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ((*meta)["splits"]["val"]["documents"], 4);
  auto dm = read_dataset_meta(out);
  ASSERT_TRUE(dm.ok()) << dm.error().message();
  EXPECT_EQ(dm->vocab_size, 300);
  EXPECT_EQ(dm->bos_id, tok->bos_id());
  EXPECT_EQ(dm->eos_id, tok->eos_id());
  EXPECT_EQ(dm->pad_id, tok->pad_id());
  EXPECT_EQ(dm->tokenizer, tok_path);
  {
    Json broken = *meta;
    broken.erase("pad_id");
    std::ofstream(out + "/meta.json") << broken.dump();
  }
  auto bad_meta = read_dataset_meta(out);
  ASSERT_FALSE(bad_meta.ok());
  EXPECT_NE(bad_meta.error().message().find(out + "/meta.json: pad_id"), std::string::npos)
      << bad_meta.error().message();
  std::ofstream(out + "/meta.json") << meta->dump(2) << "\n";  // restored: verify below reads it
  // The loader reads the directory as the trainer will: one evaluation pass over val.
  LoaderConfig lc{.seq_len = 16,
                  .batch_size = 2,
                  .seed = 0,
                  .shuffle = false,
                  .loop = false,
                  .pad_id = dm->pad_id,
                  .max_seq_len = 64,
                  .vocab_size = 300};
  auto loader = Loader::make(std::make_shared<TokenDocuments>(*val), lc);
  ASSERT_TRUE(loader.ok()) << loader.error().message();
  std::int64_t targets = 0;
  while (auto b = loader->next()) {
    targets += b->n_targets();
    for (std::size_t i = 0; i < b->tokens.size(); ++i) {
      if (b->doc_ids[i] < 0) {
        EXPECT_EQ(b->tokens[i], tok->pad_id());
      }
      if (b->tokens[i] == tok->eos_id()) {
        EXPECT_EQ(b->targets[i], -1);
      }
    }
  }
  EXPECT_EQ(targets, val->n_tokens() - val->n_docs());
  // The same seed gives the same bytes; verify accepts the directory.
  const std::string out2 = (dir / "shards2").string();
  ASSERT_EQ(
      run("data --input " + corpus + " --tokenizer " + tok_path + " --output " + out2 + " --val-fraction 0.2 --seed 3")
          .status,
      0);
  EXPECT_EQ(read_file_bytes(out + "/val-00000.bin").value(), read_file_bytes(out2 + "/val-00000.bin").value());
  herd::testing::CliResult v = run("data verify " + out);
  EXPECT_EQ(v.status, 0) << v.out;
  EXPECT_NE(v.out.find("All checksums match."), std::string::npos);
}

// meta.json records the tokenizer's CRC-32; `herd data verify` holds the tokenizer file it names to it,
// and `herd train` the data.tokenizer it decodes samples with: another file is one line naming it.
TEST(DataCli, TheTokenizerIsHeldToTheChecksumInMetaJson) {
  const auto dir = testing::temp_dir("tokcrc");
  std::vector<std::string> docs;
  const std::string corpus = write_corpus(dir, docs);
  const std::string tok_path = (dir / "tok.model").string();
  ASSERT_EQ(run("data train-tokenizer --input " + corpus + " --vocab-size 300 --output " + tok_path).status, 0);
  const std::string out = (dir / "shards").string();
  ASSERT_EQ(run("data --input " + corpus + " --tokenizer " + tok_path + " --output " + out).status, 0);
  herd::testing::CliResult v = run("data verify " + out);
  ASSERT_EQ(v.status, 0) << v.out;
  // The same vocabulary, another file: one line more at its end changes its CRC-32.
  std::ofstream(tok_path, std::ios::app) << "\n";
  v = run("data verify " + out);
  EXPECT_EQ(v.status, 1) << v.out;
  EXPECT_NE(v.out.find(out + "/meta.json: tokenizer '" + tok_path + "': CRC-32 "), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("differs from tokenizer_crc32"), std::string::npos) << v.out;
  EXPECT_EQ(std::count(v.out.begin(), v.out.end(), '\n'), 1) << v.out;
  const herd::testing::CliResult t = run("train --data.dir=" + out + " --data.tokenizer=" + tok_path +
                                         " --model.name=tiny --data.seq_len=16 --train.steps=1 --generate.samples=1");
  EXPECT_EQ(t.status, 1) << t.out;
  EXPECT_NE(t.out.find("herd train: error: data.tokenizer '" + tok_path + "': CRC-32 "), std::string::npos) << t.out;
}

TEST(DataCli, BadInputsAreOneLineErrors) {
  const auto dir = testing::temp_dir("cli_bad");
  std::vector<std::string> docs;
  const std::string corpus = write_corpus(dir, docs);
  herd::testing::CliResult missing =
      run("data --input " + corpus + " --tokenizer /no/such.model --output " + (dir / "o").string());
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.out,
            "herd data: error: tokenizer file '/no/such.model' cannot be opened; run scripts/fetch-assets.sh or pass "
            "--tokenizer with a tiktoken file\n");
  const std::string tok_path = (dir / "tok.model").string();
  ASSERT_EQ(run("data train-tokenizer --input " + corpus + " --vocab-size 280 --output " + tok_path).status, 0);
  herd::testing::CliResult field =
      run("data --input " + corpus + " --field body --tokenizer " + tok_path + " --output " + (dir / "o").string());
  EXPECT_EQ(field.status, 1);
  EXPECT_EQ(field.out, "herd data: error: " + corpus + ":1: field 'body' missing; choose the field with --field\n");
  // A corrupt shard: verify names the file and the checksum.
  const std::string out = (dir / "s").string();
  ASSERT_EQ(run("data --input " + corpus + " --tokenizer " + tok_path + " --output " + out).status, 0);
  {
    std::fstream f(out + "/train-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  herd::testing::CliResult bad = run("data verify " + out);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find(out + "/train-00000.bin: payload checksum mismatch"), std::string::npos) << bad.out;
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1);
}

}  // namespace
}  // namespace herd::data
