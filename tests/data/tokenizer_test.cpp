// The Llama 3 tokenizer against independent reference encodings (every id of both golden files), the
// whole-corpus round trip, and the errors a missing or corrupt tokenizer file produces.
#include "herd/data/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>

#include "data/test_paths.h"
#include "herd/core/json.h"
#include "herd/data/corpus.h"

namespace herd::data {
namespace {

using testing::corpus_path;
using testing::golden_dir;
using testing::llama3_tokenizer_path;

const Tokenizer& llama3() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::load(llama3_tokenizer_path());
    HERD_CHECK(t.ok(), t.error().message());
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

#define REQUIRE_LLAMA3() \
  if (llama3_tokenizer_path().empty()) GTEST_SKIP() << "no tokenizer.model: run scripts/fetch-assets.sh"

std::vector<Json> sotu_records() {
  auto text = read_file_bytes(corpus_path());
  HERD_CHECK(text.ok(), text.error().message());
  std::vector<Json> out;
  std::size_t pos = 0;
  while (pos < text->size()) {
    std::size_t eol = text->find('\n', pos);
    if (eol == std::string::npos) eol = text->size();
    if (eol > pos) out.push_back(Json::parse(text->substr(pos, eol - pos)));
    pos = eol + 1;
  }
  return out;
}

TEST(Llama3Tokenizer, LoadsTheVocabularyAndSpecialTokens) {
  REQUIRE_LLAMA3();
  const Tokenizer& tok = llama3();
  EXPECT_EQ(tok.n_ordinary(), 128000);
  EXPECT_EQ(tok.vocab_size(), 128256);
  auto specials = read_json_file(golden_dir() + "/special-tokens.json");
  ASSERT_TRUE(specials.ok());
  ASSERT_EQ(specials->size(), 256u);
  for (const Json& s : *specials) {
    EXPECT_EQ(tok.special_id(s["text"].get<std::string>()), s["id"].get<int>()) << s.dump();
  }
  EXPECT_EQ(tok.bos_id(), 128000);
  EXPECT_EQ(tok.eos_id(), 128001);
  EXPECT_EQ(tok.pad_id(), 128004);
}

TEST(Llama3Tokenizer, MatchesEveryGoldenIdOfTheShortStrings) {
  REQUIRE_LLAMA3();
  auto golden = read_json_file(golden_dir() + "/golden-llama3.json");
  ASSERT_TRUE(golden.ok()) << golden.error().message();
  ASSERT_GE(golden->size(), 10u);
  for (const Json& g : *golden) {
    const std::string text = g["text"].get<std::string>();
    auto ids = llama3().encode(text);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, g["ids"].get<std::vector<std::int32_t>>()) << "text: " << text;
    EXPECT_EQ(*llama3().decode(*ids), text);
  }
}

TEST(Llama3Tokenizer, MatchesEveryGoldenIdOfFourWholeAddresses) {
  REQUIRE_LLAMA3();
  auto golden = read_json_file(golden_dir() + "/golden-llama3-sotu.json");
  ASSERT_TRUE(golden.ok()) << golden.error().message();
  ASSERT_EQ(golden->size(), 4u);
  const std::vector<Json> records = sotu_records();
  for (const Json& g : *golden) {
    const int year = g["year"].get<int>();
    const Json* rec = nullptr;
    for (const Json& r : records) {
      if (r["year"].get<int>() == year) rec = &r;
    }
    ASSERT_NE(rec, nullptr) << year;
    auto ids = llama3().encode((*rec)["text"].get<std::string>());
    ASSERT_TRUE(ids.ok());
    const auto want = g["ids"].get<std::vector<std::int32_t>>();
    ASSERT_EQ(ids->size(), want.size()) << year;
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ((*ids)[i], want[i]) << year << " token " << i;
  }
}

// decode(encode(x)) == x for every address, and the total is the reference count of the corpus
// (2,085,350 tokens, tests/fixtures/tokenizer/llama3/NOTICE.md): one extra or missing merge anywhere would change it.
TEST(Llama3Tokenizer, RoundTripsTheWholeCorpusWithTheReferenceTokenCount) {
  REQUIRE_LLAMA3();
  auto docs = read_documents(corpus_path(), {});
  ASSERT_TRUE(docs.ok()) << docs.error().message();
  ASSERT_EQ(docs->size(), 233u);
  std::size_t total = 0;
  for (const std::string& d : *docs) {
    auto ids = llama3().encode(d);
    ASSERT_TRUE(ids.ok());
    total += ids->size();
    ASSERT_EQ(*llama3().decode(*ids), d);
    for (std::int32_t id : *ids) ASSERT_LT(id, 128000);
  }
  EXPECT_EQ(total, 2085350u);
}

TEST(Llama3Tokenizer, OrdinaryTextNeverProducesSpecialIds) {
  REQUIRE_LLAMA3();
  const std::string text = "<|begin_of_text|>hi<|eot_id|>";
  auto ids = llama3().encode(text);
  ASSERT_TRUE(ids.ok());
  for (std::int32_t id : *ids) EXPECT_LT(id, 128000);
  EXPECT_EQ(*llama3().decode(*ids), text);
  auto doc = llama3().encode_document("Hello world!");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(*doc, (std::vector<std::int32_t>{128000, 9906, 1917, 0, 128001}));
  EXPECT_EQ(*llama3().decode(*doc), "<|begin_of_text|>Hello world!<|end_of_text|>");
}

TEST(Llama3Tokenizer, RejectsInvalidUtf8AndOutOfRangeIds) {
  REQUIRE_LLAMA3();
  auto bad = llama3().encode(std::string("ok \xC3\x28 bad"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "text is not valid UTF-8 at byte 3; re-encode the input as UTF-8");
  const std::vector<std::int32_t> ids = {1, 128256};
  auto dec = llama3().decode(ids);
  ASSERT_FALSE(dec.ok());
  EXPECT_EQ(dec.error().message(), "token id 128256 is outside the vocabulary [0, 128256)");
}

std::string write_file(const std::string& name, const std::string& content) {
  const auto path = (testing::temp_dir("tok") / name).string();
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

std::string all_bytes_file() {
  std::string s;
  for (int b = 0; b < 256; ++b)
    s += base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  return s;
}

TEST(TokenizerFile, MissingFileNamesThePathAndTheFix) {
  auto t = Tokenizer::load("/nonexistent/tokenizer.model");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().message(),
            "tokenizer file '/nonexistent/tokenizer.model' cannot be opened; run scripts/fetch-assets.sh or pass "
            "--tokenizer with a tiktoken file");
}

TEST(TokenizerFile, CorruptLinesNameTheFileAndLine) {
  const std::string good = all_bytes_file();
  auto bad64 = Tokenizer::load(write_file("b64.model", good + "QUJ#Qw== 256\n"));
  ASSERT_FALSE(bad64.ok());
  EXPECT_NE(bad64.error().message().find("line 257: invalid base64 token 'QUJ#Qw=='"), std::string::npos)
      << bad64.error().message();
  auto order = Tokenizer::load(write_file("order.model", good + "QUI= 300\n"));
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.error().message().find("line 257: rank 300 out of order (expected 256)"), std::string::npos);
  auto fields = Tokenizer::load(write_file("fields.model", "QUI=\n"));
  ASSERT_FALSE(fields.ok());
  EXPECT_NE(fields.error().message().find("line 1: expected 'base64 rank'"), std::string::npos);
  auto dup = Tokenizer::load(write_file("dup.model", good + "QQ== 256\n"));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message().find("token 256 repeats token 65"), std::string::npos);
  auto missing = Tokenizer::load(write_file("bytes.model", "QQ== 0\n"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("byte 0x0 has no token"), std::string::npos);
  EXPECT_TRUE(Tokenizer::load(write_file("ok.model", good)).ok());
}

TEST(Base64, RoundTripsAndRejectsGarbage) {
  std::string out;
  for (const std::string& s :
       {std::string(""), std::string("a"), std::string("abcd"), std::string("\xff\x00\x10", 3)}) {
    ASSERT_TRUE(base64_decode(base64_encode(s), out));
    EXPECT_EQ(out, s);
  }
  EXPECT_EQ(base64_encode("Hello"), "SGVsbG8=");
  EXPECT_FALSE(base64_decode("SGV", out));
  EXPECT_FALSE(base64_decode("S=Vs", out));
  EXPECT_FALSE(base64_decode("SG!s", out));
}

}  // namespace
}  // namespace herd::data
