// What `herd data` and `herd data verify` refuse, through the binary: a directory given as --input, an
// empty text corpus, text that is not UTF-8 (the error names the file), and a data directory whose
// shards no longer match its meta.json (a deleted held-out shard, a shard from another run, a missing
// or truncated meta.json, edited counts). Each is one line with exit status 1; the intact directory
// passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli/cli_runner.h"
#include "data/test_paths.h"
#include "herd/core/json.h"

namespace herd::data {
namespace {

namespace fs = std::filesystem;
using herd::testing::CliResult;
using herd::testing::count_lines;
using herd::testing::run_herd;

// A JSONL corpus of 30 documents and a BPE tokenizer trained on it (no licence-bound file needed).
struct Fixture {
  fs::path dir;
  std::string corpus, tok;
};

Fixture make_fixture(const std::string& name) {
  Fixture f;
  f.dir = testing::temp_dir(name);
  f.corpus = (f.dir / "c.jsonl").string();
  std::ofstream out(f.corpus);
  for (int i = 0; i < 30; ++i) out << Json{{"text", "Document " + std::to_string(i) + " says hello."}}.dump() << "\n";
  out.close();
  f.tok = (f.dir / "tok.model").string();
  const CliResult t = run_herd("data train-tokenizer --input " + f.corpus + " --vocab-size 270 --output " + f.tok);
  EXPECT_EQ(t.status, 0) << t.err;
  return f;
}

// Status 1 and the error as the last line of stderr, after any warnings.
void expect_one_line_error(const CliResult& r, const std::string& want) {
  EXPECT_EQ(r.status, 1) << r.err;
  const std::size_t at = r.err.find("error: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_NE(r.err.find(want, at), std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err.substr(at)), 1) << r.err;
}

TEST(DataInputs, ADirectoryIsNotACorpusFile) {
  const Fixture f = make_fixture("dir_input");
  const CliResult r =
      run_herd("data --input " + f.dir.string() + " --tokenizer " + f.tok + " --output " + (f.dir / "o").string());
  expect_one_line_error(r, f.dir.string() + ": is a directory");
  EXPECT_FALSE(fs::exists(f.dir / "o" / "meta.json"));
  const CliResult t =
      run_herd("data --input " + f.corpus + " --tokenizer " + f.dir.string() + " --output " + (f.dir / "o").string());
  expect_one_line_error(t, "is a directory");
}

TEST(DataInputs, AnEmptyTextCorpusIsRefusedAndAnEmptyFileAmongOthersIsSkippedWithAWarning) {
  const Fixture f = make_fixture("empty_txt");
  const std::string empty = (f.dir / "empty.txt").string(), blank = (f.dir / "blank.txt").string();
  std::ofstream(empty).close();
  std::ofstream(blank) << " \n\n\t\n";
  const std::string out = (f.dir / "o").string();
  const CliResult none = run_herd("data --input " + empty + " " + blank + " --tokenizer " + f.tok + " --output " + out);
  expect_one_line_error(none, "the corpus has no documents");
  EXPECT_NE(none.err.find(blank + ": no documents"), std::string::npos) << none.err;
  // Before: the empty file became one document of BOS EOS, trained on without a word.
  const std::string text = (f.dir / "a.txt").string();
  std::ofstream(text) << "Some words to keep.\n";
  const CliResult r =
      run_herd("data --input " + empty + " " + text + " --tokenizer " + f.tok + " --output " + out + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(empty + ": no documents"), std::string::npos) << r.err;
  const Json meta = Json::parse(r.out);
  EXPECT_EQ(meta["splits"]["train"]["documents"], 1) << r.out;
  EXPECT_FALSE(meta["splits"].contains("val")) << r.out;
}

TEST(DataInputs, TextThatIsNotUtf8NamesTheFile) {
  const Fixture f = make_fixture("latin1");
  const std::string latin1 = (f.dir / "latin1.txt").string();
  std::ofstream(latin1, std::ios::binary) << "caf\xe9 au lait\n";
  expect_one_line_error(run_herd("data --input " + f.corpus + " " + latin1 + " --tokenizer " + f.tok + " --output " +
                                 (f.dir / "o").string()),
                        latin1 + ": text is not valid UTF-8 at byte 3");
}

class DataVerify : public ::testing::Test {
 protected:
  void SetUp() override {
    f_ = make_fixture("verify");
    out_ = (f_.dir / "s").string();
    // Small shards, so that a split has several and one can go missing.
    const CliResult r = run_herd("data --input " + f_.corpus + " --tokenizer " + f_.tok + " --output " + out_ +
                                 " --val-fraction 0.2 --shard-tokens 40");
    ASSERT_EQ(r.status, 0) << r.err;
    ASSERT_TRUE(fs::exists(out_ + "/val-00000.bin"));
    ASSERT_TRUE(fs::exists(out_ + "/train-00001.bin"));
    meta_ = herd::testing::slurp(out_ + "/meta.json");
  }
  void TearDown() override { fs::remove_all(f_.dir); }
  CliResult verify() { return run_herd("data verify " + out_); }
  Fixture f_;
  std::string out_, meta_;
};

TEST_F(DataVerify, TheIntactDirectoryPasses) {
  const CliResult r = verify();
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("All checksums match."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val"), std::string::npos) << r.out;
}

TEST_F(DataVerify, ADeletedHeldOutShardFails) {
  fs::remove(out_ + "/val-00000.bin");
  expect_one_line_error(verify(), out_ + "/val-00000.bin: missing, but meta.json lists it in splits.val.shards");
}

TEST_F(DataVerify, ADeletedTrainingShardFails) {
  fs::remove(out_ + "/train-00001.bin");
  expect_one_line_error(verify(), out_ + "/train-00001.bin: missing");
}

TEST_F(DataVerify, AShardMetaJsonDoesNotListFails) {
  fs::copy_file(out_ + "/train-00000.bin", out_ + "/train-00099.bin");
  expect_one_line_error(verify(), out_ + "/train-00099.bin: not listed in meta.json");
}

TEST_F(DataVerify, AMissingMetaJsonFails) {
  fs::remove(out_ + "/meta.json");
  expect_one_line_error(verify(), out_ + "/meta.json: missing");
}

TEST_F(DataVerify, ATruncatedMetaJsonFails) {
  std::ofstream(out_ + "/meta.json") << meta_.substr(0, meta_.size() / 2);
  expect_one_line_error(verify(), out_ + "/meta.json: not valid JSON");
}

TEST_F(DataVerify, EditedCountsOrFieldsFail) {
  Json m = Json::parse(meta_);
  m["splits"]["train"]["documents"] = m["splits"]["train"]["documents"].get<int>() + 1;
  std::ofstream(out_ + "/meta.json") << m.dump();
  expect_one_line_error(verify(), "splits.train says");
  m = Json::parse(meta_);
  m["splits"]["val"]["shards"] = "val-00000.bin";
  std::ofstream(out_ + "/meta.json") << m.dump();
  expect_one_line_error(verify(), "splits.val.shards: expected a non-empty list");
  m = Json::parse(meta_);
  m["vocab_size"] = 280;  // the shards say 270
  std::ofstream(out_ + "/meta.json") << m.dump();
  expect_one_line_error(verify(), "vocab size 270 but meta.json says 280");
  m = Json::parse(meta_);
  m["splits"].erase("val");
  std::ofstream(out_ + "/meta.json") << m.dump();
  expect_one_line_error(verify(), "has val-*.bin shards but meta.json lists no val split");
}

}  // namespace
}  // namespace herd::data
