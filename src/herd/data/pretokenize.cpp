// The Llama 3 pre-split: PCRE2 as the definition, an ASCII matcher as the fast path (see the header).
#include "herd/data/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>

namespace herd::data {

namespace {

// Character classes of the pattern, for ASCII bytes: \p{L}, \p{N}, \s and [\r\n]. A byte in none of
// them is "other" ([^\s\p{L}\p{N}]). Bytes >= 0x80 are kHigh: the fast path never classifies them.
enum : std::uint8_t { kLetter = 1, kDigit = 2, kSpace = 4, kNewline = 8, kHigh = 16 };

constexpr std::array<std::uint8_t, 256> make_classes() {
  std::array<std::uint8_t, 256> c{};
  for (int b = 0; b < 256; ++b) {
    if (b >= 0x80)
      c[b] = kHigh;
    else if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'))
      c[b] = kLetter;
    else if (b >= '0' && b <= '9')
      c[b] = kDigit;
    else if (b == '\r' || b == '\n')
      c[b] = kSpace | kNewline;
    else if (b == ' ' || b == '\t' || b == '\v' || b == '\f')
      c[b] = kSpace;
  }
  return c;
}
constexpr std::array<std::uint8_t, 256> kClass = make_classes();

inline std::uint8_t cls(unsigned char b) { return kClass[b]; }
inline bool is_other(std::uint8_t c) { return c == 0; }
inline char lower(unsigned char b) { return static_cast<char>(b >= 'A' && b <= 'Z' ? b + 32 : b); }

}  // namespace

std::size_t find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes at a time: the corpus is almost all ASCII.
    while (i + 8 <= n) {
      std::uint64_t w;
      __builtin_memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if (b >= 0xC2 && b <= 0xDF)
      len = 2, cp = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF)
      len = 3, cp = b & 0x0F;
    else if (b >= 0xF0 && b <= 0xF4)
      len = 4, cp = b & 0x07;
    else
      return i;
    if (i + len > n) return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return i;
    if (cp >= 0xD800 && cp <= 0xDFFF) return i;
    i += len;
  }
  return std::string_view::npos;
}

// The alternatives are tried in the pattern's order with its backtracking semantics; each comment
// names the alternative. Any read of a byte >= 0x80 returns 0 (undecided) because such a byte may be
// a letter, a digit or white space, or case-fold onto an ASCII letter ('ſ' matches 's' under (?i)).
std::size_t Pretokenizer::ascii_match(std::string_view text, std::size_t i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  const std::uint8_t c0 = cls(s[i]);
  if (c0 & kHigh) return 0;
  const std::uint8_t c1 = i + 1 < n ? cls(s[i + 1]) : 0xFF;  // 0xFF: end of text
  if (c1 != 0xFF && (c1 & kHigh)) return 0;

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (s[i] == '\'' && c1 != 0xFF) {
    const char l1 = lower(s[i + 1]);
    if (l1 == 's' || l1 == 't' || l1 == 'm' || l1 == 'd') return i + 2;
    if ((l1 == 'r' || l1 == 'v' || l1 == 'l') && i + 2 < n) {
      if (s[i + 2] >= 0x80) return 0;
      const char l2 = lower(s[i + 2]);
      if (((l1 == 'r' || l1 == 'v') && l2 == 'e') || (l1 == 'l' && l2 == 'l')) return i + 3;
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  std::size_t letters = n;  // start of the letter run, if any
  if (c0 & kLetter)
    letters = i;
  else if (!(c0 & (kNewline | kDigit)) && c1 != 0xFF && (c1 & kLetter))
    letters = i + 1;
  if (letters < n) {
    std::size_t j = letters + 1;
    while (j < n && (cls(s[j]) & kLetter)) ++j;
    if (j < n && s[j] >= 0x80) return 0;
    return j;
  }
  // \p{N}{1,3}
  if (c0 & kDigit) {
    std::size_t j = i + 1;
    while (j < n && j < i + 3 && (cls(s[j]) & kDigit)) ++j;
    if (j < n && j < i + 3 && s[j] >= 0x80) return 0;
    return j;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  std::size_t start = n;
  if (is_other(c0))
    start = i;
  else if (s[i] == ' ' && c1 != 0xFF && is_other(c1))
    start = i + 1;
  if (start < n) {
    std::size_t j = start + 1;
    while (j < n && is_other(cls(s[j]))) ++j;
    if (j < n && s[j] >= 0x80) return 0;
    while (j < n && (cls(s[j]) & kNewline)) ++j;
    return j;
  }
  // c0 is white space. \s*[\r\n]+ : the whole run, backtracked to its last newline.
  std::size_t j = i;
  std::size_t last_newline = n;
  while (j < n && (cls(s[j]) & kSpace)) {
    if (cls(s[j]) & kNewline) last_newline = j;
    ++j;
  }
  if (j < n && s[j] >= 0x80) return 0;  // U+00A0 and friends would extend the run
  if (last_newline < n) return last_newline + 1;
  // \s+(?!\S) : the run up to the end of text, or all but its last character.
  if (j == n) return j;
  if (j - i >= 2) return j - 1;
  // \s+
  return j;
}

Pretokenizer::Pretokenizer(bool ascii_fast_path) : fast_(ascii_fast_path) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kLlama3Pattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  HERD_CHECK(code != nullptr, "PCRE2 rejected the Llama 3 pattern: error ", err, " at ", offset);
  // JIT is an optimisation: without it (a platform PCRE2 lacks it for) the interpreter is used.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Pretokenizer::~Pretokenizer() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}
Pretokenizer::Pretokenizer(Pretokenizer&& o) noexcept : code_(o.code_), fast_(o.fast_) { o.code_ = nullptr; }
Pretokenizer& Pretokenizer::operator=(Pretokenizer&& o) noexcept {
  std::swap(code_, o.code_);
  fast_ = o.fast_;
  return *this;
}

Pretokenizer::Scratch::~Scratch() {
  if (match_data) pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data));
}

std::size_t Pretokenizer::pcre_match(std::string_view text, std::size_t pos, Scratch& scratch) const {
  auto* code = static_cast<pcre2_code*>(code_);
  if (!scratch.match_data) scratch.match_data = pcre2_match_data_create_from_pattern(code, nullptr);
  auto* md = static_cast<pcre2_match_data*>(scratch.match_data);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                             PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, md, nullptr);
  // Every code point starts a match of some alternative, so no match is a bug (or invalid UTF-8).
  HERD_CHECK(rc > 0, "PCRE2 found no piece at byte ", pos, " (rc ", rc, ")");
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  HERD_CHECK(ov[0] == pos && ov[1] > pos, "PCRE2 returned an empty or unanchored piece at byte ", pos);
  return ov[1];
}

std::size_t Pretokenizer::next(std::string_view text, std::size_t pos, Scratch& scratch) const {
  if (fast_) {
    const std::size_t end = ascii_match(text, pos);
    if (end) return end;
  }
  return pcre_match(text, pos, scratch);
}

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  split(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

}  // namespace herd::data
