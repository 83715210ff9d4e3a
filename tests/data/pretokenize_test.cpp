// The ASCII fast path of the pre-tokenizer against PCRE2 alone (the definition): identical pieces on
// the whole corpus and on random strings that mix ASCII classes with non-ASCII letters, digits and
// spaces; plus hand-checked splits of the pattern's corner cases.
#include "herd/data/pretokenize.h"

#include <gtest/gtest.h>

#include <random>

#include "data/test_paths.h"
#include "herd/data/corpus.h"

namespace herd::data {
namespace {

std::vector<std::string> pieces(const Pretokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view v : p.split(text)) out.emplace_back(v);
  return out;
}

TEST(Pretokenizer, SplitsTheCornerCasesOfThePattern) {
  const Pretokenizer p;
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(p, "Hello world!"), (V{"Hello", " world", "!"}));
  EXPECT_EQ(pieces(p, "I'm they'll WE'D"), (V{"I", "'m", " they", "'ll", " WE", "'D"}));
  EXPECT_EQ(pieces(p, "1234567 x"), (V{"123", "456", "7", " x"}));
  // \s+(?!\S) leaves one space for the next word; \s*[\r\n]+ ends at the last newline.
  EXPECT_EQ(pieces(p, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces(p, "a \n \n  b"), (V{"a", " \n \n", " ", " b"}));
  EXPECT_EQ(pieces(p, "end   "), (V{"end", "   "}));
  EXPECT_EQ(pieces(p, "x ...\n\ny"), (V{"x", " ...\n\n", "y"}));
  EXPECT_EQ(pieces(p, "\tcode()"), (V{"\tcode", "()"}));
  EXPECT_EQ(pieces(p, "caf\xC3\xA9 na\xC3\xAFve"), (V{"caf\xC3\xA9", " na\xC3\xAFve"}));
  EXPECT_EQ(pieces(p,
                   "a\xC2\xA0\xC2\xA0"
                   "b"),
            (V{"a", "\xC2\xA0",
               "\xC2\xA0"
               "b"}));                                  // NBSP is \s
  EXPECT_EQ(pieces(p, "'\xC5\xBF"), (V{"'\xC5\xBF"}));  // 'ſ: (?i) folds the long s onto 's'
  EXPECT_TRUE(pieces(p, "").empty());
}

TEST(Pretokenizer, FastPathDefersOnNonAscii) {
  EXPECT_EQ(Pretokenizer::ascii_match("abc", 0), 3u);
  EXPECT_EQ(Pretokenizer::ascii_match("ab\xC3\xA9", 0), 0u);
  EXPECT_EQ(Pretokenizer::ascii_match("12\xD9\xA3", 0), 0u);  // Arabic-Indic digit three
  EXPECT_EQ(Pretokenizer::ascii_match("123\xD9\xA3", 0), 3u);
}

void expect_same_split(const Pretokenizer& fast, const Pretokenizer& slow, std::string_view text) {
  ASSERT_EQ(find_invalid_utf8(text), std::string_view::npos);
  const auto a = fast.split(text);
  const auto b = slow.split(text);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].data(), b[i].data()) << "piece " << i;
    ASSERT_EQ(a[i].size(), b[i].size()) << "piece " << i << ": '" << a[i] << "' vs '" << b[i] << "'";
  }
}

TEST(Pretokenizer, FastPathEqualsPcre2OnTheWholeCorpus) {
  auto docs = read_documents(testing::corpus_path(), {});
  ASSERT_TRUE(docs.ok()) << docs.error().message();
  const Pretokenizer fast(true), slow(false);
  for (const std::string& d : *docs) expect_same_split(fast, slow, d);
}

TEST(Pretokenizer, FastPathEqualsPcre2OnRandomStrings) {
  // Atoms from every class the pattern distinguishes, ASCII and not.
  const std::vector<std::string> atoms = {"a",
                                          "Z",
                                          "s",
                                          "t",
                                          "re",
                                          "ll",
                                          "'",
                                          "0",
                                          "7",
                                          " ",
                                          "  ",
                                          "\t",
                                          "\n",
                                          "\r",
                                          "\r\n",
                                          "\v",
                                          "\f",
                                          "!",
                                          ".",
                                          "-",
                                          "#",
                                          "\x01",
                                          "\x7f",
                                          "\xC3\xA9",
                                          "\xC2\xA0",
                                          "\xE2\x80\x94",
                                          "\xD9\xA3",
                                          "\xE6\x97\xA5",
                                          "\xF0\x9F\xA6\x99",
                                          "\xC5\xBF",
                                          "\xE2\x80\xA8",
                                          "\xC2\x85",
                                          "\xE3\x80\x80",
                                          "\xE2\x85\xA0"};
  std::mt19937_64 rng(1234);
  const Pretokenizer fast(true), slow(false);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s;
    const int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) s += atoms[rng() % atoms.size()];
    expect_same_split(fast, slow, s);
  }
}

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(find_invalid_utf8("plain ascii text, longer than eight"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("caf\xC3\xA9 \xF0\x9F\xA6\x99"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("abc\xC3"), 3u);              // truncated
  EXPECT_EQ(find_invalid_utf8("abcdefghij\xC0\xAF"), 10u);  // overlong '/'
  EXPECT_EQ(find_invalid_utf8("\xED\xA0\x80"), 0u);         // surrogate
  EXPECT_EQ(find_invalid_utf8("x\xF4\x90\x80\x80"), 1u);    // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("x\x80"), 1u);                // lone continuation
}

}  // namespace
}  // namespace herd::data
