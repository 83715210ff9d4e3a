// A byte-level BPE tokenizer in the tiktoken format: Llama 3's `tokenizer.model`, or a small vocabulary
// written by the trainer (bpe_trainer.h).
//
// File format: one line per ordinary token, `base64(token bytes) rank`, ranks 0..n-1 in order. The
// rank is the token id and the merge priority (lower merges first), as in tiktoken. Special tokens are
// not in the file; they take the ids after the ordinary ones:
//   - 128,000 ordinary tokens (Llama 3): Meta's 256 special tokens, ids 128000-128255
//     (<|begin_of_text|>, <|end_of_text|>, ..., <|eot_id|>, <|reserved_special_token_N|>).
//   - any other size (herd's trained vocabularies): three, <|begin_of_text|>, <|end_of_text|>, <|pad|>.
// Encoding ordinary text never produces a special id, even when the text spells one out;
// encode_document() adds BOS and EOS explicitly.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "herd/core/error.h"
#include "herd/data/pretokenize.h"

namespace herd::data {

inline constexpr std::int64_t kLlama3OrdinaryTokens = 128000;

// The special-token names that follow `n_ordinary` ordinary tokens (see the file comment).
std::vector<std::string> special_tokens_for(std::int64_t n_ordinary);

class Tokenizer {
 public:
  // Reads a tiktoken-format file, or a Hugging Face tokenizer.json (a path ending in .json, or a
  // directory holding tokenizer.json: load_hf_json). Errors name the file and, for a malformed line,
  // its number.
  static Result<Tokenizer> load(const std::string& path);
  // Hugging Face's tokenizer.json (tokenizer_json.cpp): a byte-level BPE whose vocabulary maps GPT-2's
  // byte-to-character alphabet to ids 0..n-1, ranked as tiktoken ranks them (every merge makes a token
  // of a rank no lower than the merge before: the order tiktoken-converted files have), Llama 3's
  // pre-tokenizer regex (the one herd implements, pretokenize.h) followed by ByteLevel without its own
  // regex, and herd's special tokens after the ordinary ones (special_tokens_for). Anything else is
  // refused in one line naming the file, the field and what herd supports.
  static Result<Tokenizer> load_hf_json(const std::string& path);
  // Builds from token byte strings indexed by rank; `source` names them in error messages.
  static Result<Tokenizer> from_tokens(std::vector<std::string> tokens, const std::string& source);

  std::int64_t n_ordinary() const { return static_cast<std::int64_t>(offsets_.size()) - 1; }
  std::int64_t vocab_size() const { return n_ordinary() + static_cast<std::int64_t>(specials_.size()); }
  const std::vector<std::string>& special_tokens() const { return specials_; }
  // Id of a special token by name, or -1.
  std::int32_t special_id(std::string_view name) const;
  std::int32_t bos_id() const { return n_ordinary_i32(); }
  std::int32_t eos_id() const { return n_ordinary_i32() + 1; }
  std::int32_t pad_id() const;  // <|finetune_right_pad_id|> for Llama 3, <|pad|> otherwise

  // Ordinary text to ids (no special ids). Error when `text` is not valid UTF-8 (names the byte).
  Result<std::vector<std::int32_t>> encode(std::string_view text) const;
  // Appends to `out`; the fast form used by the shard writer.
  Status encode_into(std::string_view text, std::vector<std::int32_t>& out) const;
  // BOS + encode(text) + EOS: one document as stored in shards.
  Result<std::vector<std::int32_t>> encode_document(std::string_view text) const;

  // Ids to bytes; special ids become their names. Error on an id outside [0, vocab_size).
  Result<std::string> decode(std::span<const std::int32_t> ids) const;
  // The bytes of one ordinary token.
  std::string_view token_bytes(std::int32_t id) const;

  // One pre-split piece to ids by rank-ordered merges (tiktoken's algorithm); exposed for tests.
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;
  // Rank of a byte string, or -1 when it is not a token.
  std::int32_t rank_of(std::string_view bytes) const;

  const Pretokenizer& pretokenizer() const { return pre_; }
  // PCRE2 for every piece when off (same ids, slower): for benchmarks and tests of the fast path.
  void set_ascii_fast_path(bool on) { pre_ = Pretokenizer(on); }

 private:
  Tokenizer() = default;
  std::int32_t n_ordinary_i32() const { return static_cast<std::int32_t>(n_ordinary()); }

  std::string bytes_;                   // every token's bytes, concatenated in rank order
  std::vector<std::uint32_t> offsets_;  // token r is bytes_[offsets_[r], offsets_[r+1])
  struct Slot {
    std::int32_t rank;  // -1: empty
    std::uint32_t tag;  // high half of the hash: most probes of other tokens end here
  };
  std::vector<Slot> table_;  // open addressing, linear probing, load <= 1/2
  std::uint64_t mask_ = 0;
  std::int32_t byte_rank_[256] = {};     // id of each single byte
  std::vector<std::int32_t> pair_rank_;  // (first byte << 8 | second byte) -> id of that 2-byte token, or -1
  std::vector<std::string> specials_;
  Pretokenizer pre_;
};

// Standard base64 (RFC 4648, with padding), as tiktoken files use.
std::string base64_encode(std::string_view bytes);
// Empty optional-like result: false when `text` is not valid base64.
bool base64_decode(std::string_view text, std::string& out);

}  // namespace herd::data
