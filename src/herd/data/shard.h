// Binary token shards: the output of `herd data`, the input of the loader.
//
// One shard file holds whole documents (a document never spans two shards), little-endian:
//   header (64 bytes):
//     0  char[8]  magic "HERDTOKS"
//     8  u32      version (1)
//     12 u32      bytes per token: 2 (uint16, vocabularies up to 65,536) or 4 (uint32)
//     16 u64      vocab size (every token id is below it)
//     24 u64      token count N
//     32 u64      document count D
//     40 u32      CRC-32 of the payload (document index, then tokens)
//     44 u32      CRC-32 of header bytes [0, 44)
//     48 u8[16]   zero
//   document index: (D + 1) x u64 offsets into the tokens, first 0, last N; document d is
//                   tokens [offset[d], offset[d+1])
//   tokens: N x u16 or u32
// Reading checks the magic, version, both checksums, the file size, the index and every id, so a
// truncated, bit-flipped or foreign file is one error naming the file, never garbage batches.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "herd/core/error.h"

namespace herd::data {

inline constexpr char kShardMagic[8] = {'H', 'E', 'R', 'D', 'T', 'O', 'K', 'S'};
inline constexpr std::uint32_t kShardVersion = 1;
inline constexpr std::size_t kShardHeaderBytes = 64;

// Documents as one token array and an offset index (the in-memory form of one shard or of a whole
// split: all shards of "train" concatenated in file order).
struct TokenDocuments {
  std::int64_t vocab_size = 0;
  std::vector<std::uint64_t> offsets{0};  // (D + 1)
  std::vector<std::int32_t> tokens;       // (N)

  std::int64_t n_docs() const { return static_cast<std::int64_t>(offsets.size()) - 1; }
  std::int64_t n_tokens() const { return static_cast<std::int64_t>(tokens.size()); }
  std::int64_t doc_size(std::int64_t d) const { return static_cast<std::int64_t>(offsets[d + 1] - offsets[d]); }
  std::span<const std::int32_t> doc(std::int64_t d) const {
    return std::span<const std::int32_t>(tokens).subspan(offsets[d], offsets[d + 1] - offsets[d]);
  }
  void add_doc(std::span<const std::int32_t> ids);
  void append(const TokenDocuments& other);
};

// CRC-32 (IEEE, as zlib and xz compute it), continuing from `crc`.
std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc = 0);

Status write_shard(const std::string& path, const TokenDocuments& docs);
Result<TokenDocuments> read_shard(const std::string& path);

// The shards of one split in a `herd data` output directory ("DIR/train-00000.bin", ...), in order,
// or an error when there are none.
Result<std::vector<std::string>> split_shard_paths(const std::string& dir, const std::string& split);
// All shards of a split, concatenated; their vocab sizes must agree.
Result<TokenDocuments> read_split(const std::string& dir, const std::string& split);

}  // namespace herd::data
