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
Result<std::vector<VerifiedSplit>> verify_dataset(const std::string& dir);

}  // namespace herd::data
