// Hugging Face tokenizer.json: encoding equals Hugging Face's own `tokenizers` library on a file it
// converted (tests/data/golden/hf_tokenizer/, made by tools/hf_fixture.py tokenizer from a 2,000-token
// vocabulary trained on corpus/), Llama 3's tokenizer.json gives tiktoken's ids on the golden files,
// and what herd does not implement is refused in one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "data/test_paths.h"
#include "herd/core/json.h"
#include "herd/data/corpus.h"
#include "herd/data/pretokenize.h"
#include "herd/data/tokenizer.h"

namespace herd::data {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(HERD_SOURCE_DIR) + "/tests/data/golden/hf_tokenizer/";

TEST(HfTokenizerJson, EncodesAsHuggingFaceTokenizersDoes) {
  Result<Tokenizer> tok = Tokenizer::load(kFixture + "tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.error().message();
  EXPECT_EQ(tok->n_ordinary(), 1997);
  EXPECT_EQ(tok->vocab_size(), 2000);
  Json expected = read_json_file(kFixture + "tokenizer_expected.json").value();
  ASSERT_GE(expected["cases"].size(), 5u);
  for (const Json& c : expected["cases"]) {
    Result<std::vector<std::int32_t>> ids = tok->encode(c["text"].get<std::string>());
    ASSERT_TRUE(ids.ok()) << ids.error().message();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<std::int32_t>>()) << c["text"];
  }
  // The directory form (a Hugging Face model directory) loads the same file.
  Result<Tokenizer> dir = Tokenizer::load(kFixture);
  ASSERT_TRUE(dir.ok()) << dir.error().message();
  EXPECT_EQ(dir->vocab_size(), 2000);
}

// GPT-2's byte-to-character alphabet, written independently of the reader: the printable Latin-1
// bytes stand for themselves, the rest take U+0100 onwards in byte order.
std::string byte_chars(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    std::uint32_t cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174))) {
      std::uint32_t k = 0;
      for (std::uint32_t x = 0; x < b; ++x) {
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174))) ++k;
      }
      cp = 256 + k;
    }
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// Llama 3's tokenizer.model as tokenizer.json, the way transformers' TikTokenConverter writes it: ids are
// ranks, every split of a token into two tokens is a merge, merges ordered by the token they make.
Json llama3_tokenizer_json(const Tokenizer& tt) {
  Json vocab = Json::object();
  Json merges = Json::array();
  for (std::int32_t r = 0; r < tt.n_ordinary(); ++r) {
    const std::string tok(tt.token_bytes(r));
    vocab[byte_chars(tok)] = r;
    std::vector<std::pair<std::pair<std::int32_t, std::int32_t>, Json>> local;
    for (std::size_t i = 1; i < tok.size(); ++i) {
      const std::int32_t a = tt.rank_of(tok.substr(0, i)), b = tt.rank_of(tok.substr(i));
      if (a >= 0 && b >= 0)
        local.push_back({{a, b}, Json::array({byte_chars(tok.substr(0, i)), byte_chars(tok.substr(i))})});
    }
    std::sort(local.begin(), local.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (auto& [k, m] : local) merges.push_back(std::move(m));
  }
  Json added = Json::array();
  const std::vector<std::string> sp = special_tokens_for(tt.n_ordinary());
  for (std::size_t k = 0; k < sp.size(); ++k) {
    added.push_back({{"id", tt.n_ordinary() + static_cast<std::int64_t>(k)}, {"content", sp[k]}, {"special", true}});
  }
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"model",
       {{"type", "BPE"}, {"byte_fallback", false}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", merges}}}};
}

TEST(HfTokenizerJson, Llama3TokenizerJsonGivesTiktokensIdsOnTheGoldenFiles) {
  if (testing::llama3_tokenizer_path().empty()) GTEST_SKIP() << "no tokenizer.model: run scripts/fetch-assets.sh";
  const Tokenizer tt = Tokenizer::load(testing::llama3_tokenizer_path()).value();
  const fs::path dir = testing::temp_dir("hf_tokenizer_json");
  std::ofstream((dir / "tokenizer.json").string()) << llama3_tokenizer_json(tt).dump();
  Result<Tokenizer> tok = Tokenizer::load((dir / "tokenizer.json").string());
  ASSERT_TRUE(tok.ok()) << tok.error().message();
  EXPECT_EQ(tok->vocab_size(), 128256);
  EXPECT_EQ(tok->eos_id(), 128001);
  const Json golden = read_json_file(testing::golden_dir() + "/golden-llama3.json").value();
  for (const Json& c : golden) {
    Result<std::vector<std::int32_t>> ids = tok->encode(c["text"].get<std::string>());
    ASSERT_TRUE(ids.ok()) << ids.error().message();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<std::int32_t>>()) << c["text"];
  }
  // Four whole State of the Union addresses (the texts are the corpus's records of those years).
  const std::string corpus = read_file_bytes(testing::corpus_path()).value();
  std::map<int, std::string> texts;
  for (std::size_t pos = 0; pos < corpus.size();) {
    const std::size_t eol = std::min(corpus.find('\n', pos), corpus.size());
    if (eol > pos) {
      const Json r = Json::parse(corpus.substr(pos, eol - pos));
      texts[r["year"].get<int>()] = r["text"].get<std::string>();
    }
    pos = eol + 1;
  }
  const Json sotu = read_json_file(testing::golden_dir() + "/golden-llama3-sotu.json").value();
  ASSERT_EQ(sotu.size(), 4u);
  for (const Json& g : sotu) {
    Result<std::vector<std::int32_t>> ids = tok->encode(texts.at(g["year"].get<int>()));
    ASSERT_TRUE(ids.ok()) << ids.error().message();
    EXPECT_EQ(*ids, g["ids"].get<std::vector<std::int32_t>>()) << g["year"];
  }
  fs::remove_all(dir);
}

TEST(HfTokenizerJson, WhatHerdDoesNotImplementIsRefusedInOneLine) {
  const Json good = read_json_file(kFixture + "tokenizer.json").value();
  const fs::path dir = testing::temp_dir("hf_tokenizer_bad");
  auto refused = [&](const std::function<void(Json&)>& edit, std::initializer_list<std::string> parts) {
    Json j = good;
    edit(j);
    const std::string path = (dir / "tokenizer.json").string();
    std::ofstream(path, std::ios::trunc) << j.dump();
    Result<Tokenizer> t = Tokenizer::load(path);
    ASSERT_FALSE(t.ok());
    const std::string& m = t.error().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(path), std::string::npos) << m;
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
  };
  refused([](Json& j) { j["model"]["type"] = "Unigram"; }, {"model.type", "byte-level BPE"});
  refused([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+"; },
          {"pre_tokenizer", "not Llama 3's regex"});
  refused(
      [](Json& j) {
        j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"use_regex", true}};
      },
      {"pre_tokenizer", "Llama 3's"});
  refused([](Json& j) { j["normalizer"] = {{"type", "NFC"}}; }, {"normalizer"});
  refused([](Json& j) { std::swap(j["model"]["merges"][0], j["model"]["merges"][500]); },
          {"model.merges[", "rank order"});
  refused([](Json& j) { j["added_tokens"][2]["content"] = "<|unk|>"; }, {"added_tokens", "<|pad|>", "<|unk|>"});
  refused([](Json& j) { j["model"]["vocab"]["\xe4\xb8\xad"] = 5000; }, {"model.vocab", "not in [0, "});
  refused([](Json& j) { j["model"]["vocab"].erase("Ġ"); }, {"model.vocab"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace herd::data
