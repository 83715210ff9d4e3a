// A byte-level BPE trainer that writes a small vocabulary in the tiktoken format.
//
// A small model should not pay for 128K embedding rows: herd's tiny and small presets use 8192 ids.
// Training follows the classic algorithm over the Llama 3 pre-split (so pieces never cross the
// pattern's boundaries): start from the 256 single bytes (ranks 0..255 in byte order), then repeatedly
// merge the most frequent adjacent pair across all pieces, weighted by piece frequency, until
// vocab_size - 3 ordinary tokens exist (the last three ids are <|begin_of_text|>, <|end_of_text|>,
// <|pad|>; see tokenizer.h). Ties go to the pair with the smallest (left id, right id), so training is
// deterministic. A merge whose bytes already are a token (reached by another split) reuses it.
// Pair counts are kept incrementally: each merge touches only the pieces that contain the pair.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/error.h"

namespace herd::data {

struct BpeTrainerConfig {
  std::int64_t vocab_size = 8192;  // ordinary tokens + 3 special tokens
};

struct BpeTrainerStats {
  std::int64_t pieces = 0;         // pre-split pieces in the corpus
  std::int64_t unique_pieces = 0;  // distinct pieces (the training works on these)
  std::int64_t merges = 0;
};

// Token byte strings by rank (size vocab_size - 3). Errors: vocab_size below 256 + 3 + 1, or a corpus
// too small to supply that many merges.
Result<std::vector<std::string>> train_bpe(const std::vector<std::string>& documents, const BpeTrainerConfig& config,
                                           BpeTrainerStats* stats = nullptr);

// Writes `base64(bytes) rank` lines, the format Tokenizer::load reads.
Status write_tiktoken_file(const std::string& path, const std::vector<std::string>& tokens);

}  // namespace herd::data
