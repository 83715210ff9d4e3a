// The BPE trainer: a hand-computed example, determinism, fewer tokens with more merges, loading the
// written file back with its special tokens, and the round trip on the whole corpus.
#include "herd/data/bpe_trainer.h"

#include <gtest/gtest.h>

#include "data/test_paths.h"
#include "herd/data/corpus.h"
#include "herd/data/tokenizer.h"

namespace herd::data {
namespace {

Tokenizer from(const std::vector<std::string>& tokens) {
  auto t = Tokenizer::from_tokens(tokens, "trained");
  HERD_CHECK(t.ok(), t.error().message());
  return std::move(t).value();
}

const std::vector<std::string>& corpus() {
  static const auto* docs = [] {
    auto d = read_documents(testing::corpus_path(), {});
    HERD_CHECK(d.ok(), d.error().message());
    return new std::vector<std::string>(std::move(d).value());
  }();
  return *docs;
}

// "aaabdaaabac" is one pre-split piece. Pair counts: aa 4, ab 2, others 1, so merge 1 is (a, a) -> 256.
// The piece becomes [aa] a b d [aa] a b a c: (aa, a) 2 and (a, b) 2 tie; (97, 98) < (256, 97) wins
// -> 257 "ab". Then [aa][ab] d [aa][ab] a c: (256, 257) 2 -> 258 "aaab". By hand.
TEST(BpeTrainer, ReproducesAHandComputedExample) {
  auto tokens = train_bpe({"aaabdaaabac"}, {.vocab_size = 256 + 3 + 3});
  ASSERT_TRUE(tokens.ok()) << tokens.error().message();
  ASSERT_EQ(tokens->size(), 259u);
  EXPECT_EQ((*tokens)[65], "A");
  EXPECT_EQ((*tokens)[256], "aa");
  EXPECT_EQ((*tokens)[257], "ab");
  EXPECT_EQ((*tokens)[258], "aaab");
  const Tokenizer tok = from(*tokens);
  EXPECT_EQ(tok.vocab_size(), 262);
  EXPECT_EQ(tok.special_tokens(), (std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"}));
  EXPECT_EQ(*tok.encode("aaabdaaabac"), (std::vector<std::int32_t>{258, 'd', 258, 'a', 'c'}));
  EXPECT_EQ(*tok.encode_document("ab"), (std::vector<std::int32_t>{259, 257, 260}));
  // One more merge than the corpus can supply is an error naming the numbers.
  auto too_many = train_bpe({"aaabdaaabac"}, {.vocab_size = 256 + 3 + 20});
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.error().message().find("fewer than vocab_size (279)"), std::string::npos);
  EXPECT_FALSE(train_bpe({"x"}, {.vocab_size = 100}).ok());
}

// Pieces never merge across the pre-split: the pieces are "the", " the" x 3, " cat", "."; (e, ' ')
// never forms because ' ' starts the next piece.
TEST(BpeTrainer, MergesStayInsidePreSplitPieces) {
  auto tokens = train_bpe({"the the the cat. the"}, {.vocab_size = 256 + 3 + 4});
  ASSERT_TRUE(tokens.ok());
  for (std::size_t r = 256; r < tokens->size(); ++r) {
    const std::string& t = (*tokens)[r];
    EXPECT_EQ(t.find(' ', 1), std::string::npos) << "token '" << t << "' crosses a piece boundary";
  }
  // (t, h) and (h, e) both occur 4 times; the smaller key (104, 101) wins. Then (t, he) 4, ( , the) 3.
  EXPECT_EQ((*tokens)[256], "he");
  EXPECT_EQ((*tokens)[257], "the");
  EXPECT_EQ((*tokens)[258], " the");
}

TEST(BpeTrainer, IsDeterministicAndMoreMergesGiveFewerTokens) {
  const std::vector<std::string> sample(corpus().begin(), corpus().begin() + 20);
  auto a = train_bpe(sample, {.vocab_size = 600});
  auto b = train_bpe(sample, {.vocab_size = 600});
  auto c = train_bpe(sample, {.vocab_size = 1200});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  // The larger vocabulary extends the smaller one: same merges first.
  EXPECT_TRUE(std::equal(a->begin(), a->end(), c->begin()));
  const Tokenizer small = from(*a), large = from(*c);
  std::size_t bytes = 0, n_small = 0, n_large = 0;
  for (const std::string& d : sample) {
    bytes += d.size();
    n_small += small.encode(d)->size();
    n_large += large.encode(d)->size();
  }
  EXPECT_LT(n_small, bytes * 6 / 10);
  EXPECT_LT(n_large, n_small);
}

// The trained tokenizer written to disk and loaded back round-trips every address of the corpus.
TEST(BpeTrainer, WrittenFileRoundTripsTheWholeCorpus) {
  const std::vector<std::string> sample(corpus().begin(), corpus().begin() + 30);
  BpeTrainerStats stats;
  auto tokens = train_bpe(sample, {.vocab_size = 1024}, &stats);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(stats.merges, 1024 - 3 - 256);
  EXPECT_GT(stats.pieces, stats.unique_pieces);
  const std::string path = (testing::temp_dir("bpe") / "small.model").string();
  ASSERT_TRUE(write_tiktoken_file(path, *tokens).ok());
  auto tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.error().message();
  EXPECT_EQ(tok->vocab_size(), 1024);
  EXPECT_EQ(tok->eos_id(), 1022);
  EXPECT_EQ(tok->pad_id(), 1023);
  for (const std::string& d : corpus()) {
    auto ids = tok->encode(d);
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(*tok->decode(*ids), d);
  }
}

}  // namespace
}  // namespace herd::data
