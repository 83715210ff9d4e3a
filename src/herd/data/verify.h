// Checking a whole `herd data` output directory against its meta.json (what `herd data verify` runs).
//
// Each shard checks itself (magic, checksums, index, ids: shard.h), but only meta.json knows which
// shards should be there: a deleted held-out shard, a shard left over from another run, a missing or
// truncated meta.json, or counts that no longer add up each pass a shard-by-shard check. verify_dataset
// reads meta.json first and holds every split it lists, and every split on disk, to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/error.h"

namespace herd::data {

struct VerifiedSplit {
  std::string name;  // "train" or "val"
  std::vector<std::string> shards;
  std::int64_t documents = 0;
  std::int64_t tokens = 0;
  std::int64_t vocab_size = 0;
};

// Errors (one line naming the file and the field): meta.json missing or not valid JSON; a field of
// meta.json missing or mistyped (vocab_size, the special ids, splits.<name>.documents/tokens/shards);
// no train split; a listed shard missing, or a shard on disk that meta.json does not list; a shard
// that fails read_shard; documents, tokens or the vocab size differing from meta.json.
// It also holds the tokenizer meta.json names to meta.json's tokenizer_crc32, when that file is there.
Result<std::vector<VerifiedSplit>> verify_dataset(const std::string& dir);

// The CRC-32 of a whole file: what `herd data` records of its tokenizer in meta.json (tokenizer_crc32).
Result<std::uint32_t> file_crc32(const std::string& path);

// The tokenizer `path` (given as `field`, e.g. "data.tokenizer") against the tokenizer_crc32 that
// DIR/meta.json records: an error naming the file and both checksums when they differ (the shards
// were made with another tokenizer file). Nothing to compare (no meta.json, no checksum in it): Ok.
Status check_tokenizer_checksum(const std::string& dir, const std::string& path, const std::string& field);

}  // namespace herd::data
