// tiktoken-format BPE: file reading, rank lookup (an open-addressing table over one byte arena) and
// the rank-ordered merge of each pre-split piece.
#include "herd/data/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace herd::data {

namespace {

constexpr std::int32_t kNoRank = std::numeric_limits<std::int32_t>::max();

// 64x64->128-bit multiply folded to 64 bits: every input bit reaches every output bit, so both the
// slot (low bits) and the tag (high bits) are well mixed even for short, similar tokens.
inline std::uint64_t fold_mul(std::uint64_t a, std::uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

inline std::uint64_t hash_bytes(const char* p, std::size_t n) {
  std::uint64_t h = fold_mul(n ^ 0x9E3779B97F4A7C15ULL, 0xC2B2AE3D27D4EB4FULL);
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = fold_mul(h ^ w, 0xFF51AFD7ED558CCDULL);
    p += 8;
    n -= 8;
  }
  std::uint64_t w = 0;
  std::memcpy(&w, p, n);
  return fold_mul(h ^ w ^ 0x2D358DCCAA6C78A5ULL, 0xC4CEB9FE1A85EC53ULL);
}

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v =
        (std::uint8_t(bytes[i]) << 16) | (std::uint8_t(bytes[i + 1]) << 8) | std::uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  const std::size_t rest = bytes.size() - i;
  if (rest) {
    std::uint32_t v = std::uint8_t(bytes[i]) << 16;
    if (rest == 2) v |= std::uint8_t(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string& out) {
  out.clear();
  if (text.size() % 4 != 0) return false;
  for (std::size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const unsigned char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad) return false;  // data after '='
      v[k] = base64_value(c);
      if (v[k] < 0) return false;
    }
    const std::uint32_t w = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>(w >> 16);
    if (pad < 2) out += static_cast<char>((w >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(w & 0xFF);
  }
  return true;
}

std::vector<std::string> special_tokens_for(std::int64_t n_ordinary) {
  if (n_ordinary != kLlama3OrdinaryTokens) return {"<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"};
  // Meta's list: ten named tokens between reserved ones, then reserved tokens up to 256 in all.
  std::vector<std::string> s = {"<|begin_of_text|>",
                                "<|end_of_text|>",
                                "<|reserved_special_token_0|>",
                                "<|reserved_special_token_1|>",
                                "<|finetune_right_pad_id|>",
                                "<|reserved_special_token_2|>",
                                "<|start_header_id|>",
                                "<|end_header_id|>",
                                "<|eom_id|>",
                                "<|eot_id|>",
                                "<|python_tag|>"};
  for (int r = 3; s.size() < 256; ++r) s.push_back("<|reserved_special_token_" + std::to_string(r) + "|>");
  return s;
}

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) return load_hf_json(path);
  if (std::filesystem::is_directory(path, ec) &&
      std::filesystem::is_regular_file(std::filesystem::path(path) / "tokenizer.json", ec)) {
    return load_hf_json((std::filesystem::path(path) / "tokenizer.json").string());
  }
  if (std::filesystem::is_directory(path, ec)) {
    return make_error("tokenizer file '", path, "' is a directory; pass the tiktoken file inside it");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_error("tokenizer file '", path,
                      "' cannot be opened; run scripts/fetch-assets.sh or pass --tokenizer with a tiktoken file");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> tokens;
  std::string decoded;
  std::size_t pos = 0;
  std::int64_t line_no = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::size_t sp = line.find(' ');
    const auto where = [&] { return detail::concat("tokenizer file '", path, "' line ", line_no, ": "); };
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
      return make_error(where(), "expected 'base64 rank', got '", line.substr(0, 40), "'; the file is corrupt");
    }
    if (!base64_decode(line.substr(0, sp), decoded) || decoded.empty()) {
      return make_error(where(), "invalid base64 token '", line.substr(0, std::min<std::size_t>(sp, 40)),
                        "'; the file is corrupt");
    }
    std::int64_t rank = 0;
    const std::string_view r = line.substr(sp + 1);
    for (char c : r) {
      if (c < '0' || c > '9' || rank > (1 << 30)) return make_error(where(), "invalid rank '", r, "'");
      rank = rank * 10 + (c - '0');
    }
    if (r.empty() || rank != static_cast<std::int64_t>(tokens.size())) {
      return make_error(where(), "rank ", r, " out of order (expected ", tokens.size(),
                        "); ranks must be 0, 1, 2, ... in file order");
    }
    tokens.push_back(decoded);
  }
  return from_tokens(std::move(tokens), "tokenizer file '" + path + "'");
}

Result<Tokenizer> Tokenizer::from_tokens(std::vector<std::string> tokens, const std::string& source) {
  Tokenizer t;
  t.offsets_.reserve(tokens.size() + 1);
  t.offsets_.push_back(0);
  for (const std::string& tok : tokens) {
    t.bytes_ += tok;
    t.offsets_.push_back(static_cast<std::uint32_t>(t.bytes_.size()));
  }
  std::uint64_t cap = 16;
  while (cap < 2 * tokens.size()) cap *= 2;
  t.table_.assign(cap, Slot{-1, 0});
  t.mask_ = cap - 1;
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    const std::string& tok = tokens[r];
    const std::uint64_t h = hash_bytes(tok.data(), tok.size());
    std::uint64_t slot = h & t.mask_;
    while (t.table_[slot].rank >= 0) {
      if (t.token_bytes(t.table_[slot].rank) == tok) {
        return make_error(source, ": token ", r, " repeats token ", t.table_[slot].rank, "; the file is corrupt");
      }
      slot = (slot + 1) & t.mask_;
    }
    t.table_[slot] = Slot{static_cast<std::int32_t>(r), static_cast<std::uint32_t>(h >> 32)};
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (t.rank_of(std::string_view(&c, 1)) < 0) {
      return make_error(source, ": byte 0x", std::hex, b,
                        " has no token; a byte-level BPE vocabulary needs all 256 single bytes");
    }
  }
  t.pair_rank_.assign(1 << 16, -1);
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    t.byte_rank_[b] = t.rank_of(std::string_view(&c, 1));
    for (int b2 = 0; b2 < 256; ++b2) {
      const char pair[2] = {c, static_cast<char>(b2)};
      t.pair_rank_[(b << 8) | b2] = t.rank_of(std::string_view(pair, 2));
    }
  }
  t.specials_ = special_tokens_for(static_cast<std::int64_t>(tokens.size()));
  return t;
}

std::int32_t Tokenizer::special_id(std::string_view name) const {
  for (std::size_t i = 0; i < specials_.size(); ++i) {
    if (specials_[i] == name) return n_ordinary_i32() + static_cast<std::int32_t>(i);
  }
  return -1;
}

std::int32_t Tokenizer::pad_id() const {
  const std::int32_t p = special_id("<|pad|>");
  return p >= 0 ? p : special_id("<|finetune_right_pad_id|>");
}

std::string_view Tokenizer::token_bytes(std::int32_t id) const {
  HERD_DCHECK(id >= 0 && id < n_ordinary(), "not an ordinary token: ", id);
  return std::string_view(bytes_.data() + offsets_[id], offsets_[id + 1] - offsets_[id]);
}

std::int32_t Tokenizer::rank_of(std::string_view b) const {
  const std::uint64_t h = hash_bytes(b.data(), b.size());
  const auto tag = static_cast<std::uint32_t>(h >> 32);
  std::uint64_t slot = h & mask_;
  for (;;) {
    const Slot e = table_[slot];
    if (e.rank < 0) return -1;
    if (e.tag == tag) {
      const std::uint32_t off = offsets_[e.rank];
      if (offsets_[e.rank + 1] - off == b.size() && std::memcmp(bytes_.data() + off, b.data(), b.size()) == 0) {
        return e.rank;
      }
    }
    slot = (slot + 1) & mask_;
  }
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  const std::int32_t whole = rank_of(piece);
  if (whole >= 0) {
    out.push_back(whole);
    return;
  }
  // parts[k]: start byte, token id of part k, and rank of part k merged with part k+1 (the id of the
  // merged token, so merging needs no lookup to know the new part's id). Merge the lowest-ranked
  // adjacent pair (leftmost on ties) until no adjacent pair is a token.
  struct Part {
    std::uint32_t start;
    std::int32_t id;
    std::int32_t rank;
  };
  const std::size_t n = piece.size();
  Part small[64];
  std::vector<Part> large;
  Part* parts = small;
  if (n + 1 > 64) {
    large.resize(n + 1);
    parts = large.data();
  }
  std::size_t count = n + 1;  // parts[n] is a sentinel holding the end offset
  const auto* bytes = reinterpret_cast<const unsigned char*>(piece.data());
  for (std::size_t k = 0; k < n; ++k) {
    parts[k].start = static_cast<std::uint32_t>(k);
    parts[k].id = byte_rank_[bytes[k]];
    const std::int32_t r = k + 1 < n ? pair_rank_[(bytes[k] << 8) | bytes[k + 1]] : -1;
    parts[k].rank = r < 0 ? kNoRank : r;
  }
  parts[n] = Part{static_cast<std::uint32_t>(n), -1, kNoRank};
  const auto pair_rank = [&](std::size_t k) -> std::int32_t {
    if (k + 2 >= count) return kNoRank;
    const std::int32_t r = rank_of(piece.substr(parts[k].start, parts[k + 2].start - parts[k].start));
    return r < 0 ? kNoRank : r;
  };
  for (;;) {
    std::size_t best = 0;
    std::int32_t best_rank = kNoRank;
    for (std::size_t k = 0; k + 1 < count; ++k) {
      if (parts[k].rank < best_rank) best_rank = parts[k].rank, best = k;
    }
    if (best_rank == kNoRank) break;
    parts[best].id = best_rank;
    std::copy(parts + best + 2, parts + count, parts + best + 1);
    --count;
    parts[best].rank = pair_rank(best);
    if (best > 0) parts[best - 1].rank = pair_rank(best - 1);
  }
  for (std::size_t k = 0; k + 1 < count; ++k) out.push_back(parts[k].id);
}

Status Tokenizer::encode_into(std::string_view text, std::vector<std::int32_t>& out) const {
  const std::size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    return make_error("text is not valid UTF-8 at byte ", bad, "; re-encode the input as UTF-8");
  }
  pre_.split(text, [&](std::string_view piece) { encode_piece(piece, out); });
  return {};
}

Result<std::vector<std::int32_t>> Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 4 + 1);
  HERD_RETURN_IF_ERROR(encode_into(text, ids));
  return ids;
}

Result<std::vector<std::int32_t>> Tokenizer::encode_document(std::string_view text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 4 + 2);
  ids.push_back(bos_id());
  HERD_RETURN_IF_ERROR(encode_into(text, ids));
  ids.push_back(eos_id());
  return ids;
}

Result<std::string> Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  for (const std::int32_t id : ids) {
    if (id >= 0 && id < n_ordinary()) {
      out += token_bytes(id);
    } else if (id >= n_ordinary() && id < vocab_size()) {
      out += specials_[static_cast<std::size_t>(id - n_ordinary())];
    } else {
      return make_error("token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
    }
  }
  return out;
}

}  // namespace herd::data
