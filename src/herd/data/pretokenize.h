// The Llama 3 pre-tokenizer: splits text into the pieces that BPE then merges.
//
// The split is defined by Meta's regular expression (kLlama3Pattern). PCRE2 (UTF + UCP, JIT) is the
// definition; a hand-written matcher handles the common case where every byte it must look at is ASCII
// and hands the position to PCRE2 the moment it would read a byte >= 0x80. Every position of valid
// UTF-8 text starts a non-empty match, so the regex's find-all is a chain of anchored matches and the
// two matchers can alternate piece by piece without changing the result (tests compare them on the
// whole corpus and on random strings).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "herd/core/error.h"

namespace herd::data {

inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates and code points above
// U+10FFFF are invalid), or npos when the text is valid.
std::size_t find_invalid_utf8(std::string_view text);

class Pretokenizer {
 public:
  // Compiles kLlama3Pattern; the ASCII fast path can be switched off to test it against PCRE2 alone.
  explicit Pretokenizer(bool ascii_fast_path = true);
  ~Pretokenizer();
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;

  // Calls fn(std::string_view piece) for each piece in order; the pieces concatenate to `text`.
  // Precondition: `text` is valid UTF-8 (find_invalid_utf8 == npos). Thread-safe.
  template <typename Fn>
  void split(std::string_view text, Fn&& fn) const {
    Scratch scratch;
    std::size_t pos = 0;
    while (pos < text.size()) {
      const std::size_t end = next(text, pos, scratch);
      fn(text.substr(pos, end - pos));
      pos = end;
    }
  }
  std::vector<std::string_view> split(std::string_view text) const;

  // The hand-written matcher alone: end of the match at `pos`, or 0 when it would need to read a byte
  // >= 0x80 (then PCRE2 decides). Exposed for tests.
  static std::size_t ascii_match(std::string_view text, std::size_t pos);

 private:
  struct Scratch {
    ~Scratch();
    void* match_data = nullptr;  // pcre2_match_data_8*, created on the first fallback
  };
  std::size_t next(std::string_view text, std::size_t pos, Scratch& scratch) const;
  std::size_t pcre_match(std::string_view text, std::size_t pos, Scratch& scratch) const;

  void* code_ = nullptr;  // pcre2_code_8*
  bool fast_ = true;
};

}  // namespace herd::data
