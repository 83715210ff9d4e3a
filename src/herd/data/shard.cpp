// Token shard reading and writing with checksums (format in the header).
#include "herd/data/shard.h"

#include <lzma.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "herd/core/file_write.h"
#include "herd/core/json.h"

namespace herd::data {

namespace {

template <typename T>
void put(std::string& buf, std::size_t at, T v) {
  std::memcpy(buf.data() + at, &v, sizeof v);
}
template <typename T>
T get(const std::string& buf, std::size_t at) {
  T v;
  std::memcpy(&v, buf.data() + at, sizeof v);
  return v;
}

}  // namespace

void TokenDocuments::add_doc(std::span<const std::int32_t> ids) {
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  offsets.push_back(tokens.size());
}

void TokenDocuments::append(const TokenDocuments& other) {
  const std::uint64_t base = tokens.size();
  tokens.insert(tokens.end(), other.tokens.begin(), other.tokens.end());
  for (std::size_t d = 1; d < other.offsets.size(); ++d) offsets.push_back(base + other.offsets[d]);
}

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc) {
  return lzma_crc32(static_cast<const std::uint8_t*>(data), n, crc);
}

Status write_shard(const std::string& path, const TokenDocuments& docs) {
  static_assert(std::endian::native == std::endian::little, "shards are little-endian");
  const std::uint32_t width = docs.vocab_size <= 65536 ? 2 : 4;
  std::string payload(docs.offsets.size() * 8 + docs.tokens.size() * width, '\0');
  std::memcpy(payload.data(), docs.offsets.data(), docs.offsets.size() * 8);
  std::size_t at = docs.offsets.size() * 8;
  for (const std::int32_t t : docs.tokens) {
    HERD_CHECK(t >= 0 && t < docs.vocab_size, "token ", t, " outside the vocabulary ", docs.vocab_size);
    if (width == 2)
      put<std::uint16_t>(payload, at, static_cast<std::uint16_t>(t));
    else
      put<std::uint32_t>(payload, at, static_cast<std::uint32_t>(t));
    at += width;
  }
  std::string header(kShardHeaderBytes, '\0');
  std::memcpy(header.data(), kShardMagic, 8);
  put<std::uint32_t>(header, 8, kShardVersion);
  put<std::uint32_t>(header, 12, width);
  put<std::uint64_t>(header, 16, static_cast<std::uint64_t>(docs.vocab_size));
  put<std::uint64_t>(header, 24, docs.tokens.size());
  put<std::uint64_t>(header, 32, static_cast<std::uint64_t>(docs.n_docs()));
  put<std::uint32_t>(header, 40, crc32(payload.data(), payload.size()));
  put<std::uint32_t>(header, 44, crc32(header.data(), 44));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(path, ": cannot create shard file; check that the directory is writable");
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
  return close_written(out, path);
}

Result<TokenDocuments> read_shard(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return make_error(path, ": is a directory, not a token shard");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return make_error(path, ": cannot open shard; run herd data to create it");
  const std::streamoff size = in.tellg();
  if (size < 0) return make_error(path, ": cannot read the shard's size");
  std::string buf(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(buf.data(), static_cast<std::streamsize>(buf.size()))) return make_error(path, ": read failed");
  const auto bad = [&](const auto&... why) {
    return make_error(path, ": ", detail::concat(why...), "; the shard is corrupt, regenerate it with herd data");
  };
  if (buf.size() < kShardHeaderBytes) return bad("file is ", buf.size(), " bytes, shorter than the header");
  if (std::memcmp(buf.data(), kShardMagic, 8) != 0) return bad("magic is not HERDTOKS (not a herd token shard)");
  if (get<std::uint32_t>(buf, 44) != crc32(buf.data(), 44)) return bad("header checksum mismatch");
  const auto version = get<std::uint32_t>(buf, 8);
  if (version != kShardVersion) {
    return make_error(path, ": shard version ", version, " is not supported (this herd reads version ", kShardVersion,
                      "); regenerate it with this herd's herd data");
  }
  const auto width = get<std::uint32_t>(buf, 12);
  const auto vocab = get<std::uint64_t>(buf, 16);
  const auto n_tokens = get<std::uint64_t>(buf, 24);
  const auto n_docs = get<std::uint64_t>(buf, 32);
  if (width != 2 && width != 4) return bad("bytes per token is ", width, ", expected 2 or 4");
  if (vocab == 0 || vocab > (1ULL << 31)) return bad("vocab size ", vocab, " out of range");
  const std::uint64_t want = kShardHeaderBytes + (n_docs + 1) * 8 + n_tokens * width;
  if (n_docs > buf.size() || n_tokens > buf.size() || buf.size() != want) {
    return bad("file is ", buf.size(), " bytes but its header describes ", want, " (truncated?)");
  }
  const std::uint32_t crc = crc32(buf.data() + kShardHeaderBytes, buf.size() - kShardHeaderBytes);
  if (crc != get<std::uint32_t>(buf, 40)) {
    return bad("payload checksum mismatch (stored ", get<std::uint32_t>(buf, 40), ", computed ", crc, ")");
  }
  TokenDocuments docs;
  docs.vocab_size = static_cast<std::int64_t>(vocab);
  docs.offsets.resize(n_docs + 1);
  std::memcpy(docs.offsets.data(), buf.data() + kShardHeaderBytes, (n_docs + 1) * 8);
  if (docs.offsets.front() != 0 || docs.offsets.back() != n_tokens ||
      !std::is_sorted(docs.offsets.begin(), docs.offsets.end())) {
    return bad("document index is not increasing from 0 to ", n_tokens);
  }
  docs.tokens.resize(n_tokens);
  const std::size_t base = kShardHeaderBytes + (n_docs + 1) * 8;
  for (std::uint64_t i = 0; i < n_tokens; ++i) {
    const std::uint32_t t = width == 2 ? get<std::uint16_t>(buf, base + 2 * i) : get<std::uint32_t>(buf, base + 4 * i);
    if (t >= vocab) return bad("token ", i, " is ", t, ", outside the vocabulary of ", vocab);
    docs.tokens[i] = static_cast<std::int32_t>(t);
  }
  return docs;
}

Result<std::vector<std::string>> split_shard_paths(const std::string& dir, const std::string& split) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return make_error("data directory '", dir, "' does not exist; create it with herd data --output ", dir);
  }
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(split + "-", 0) == 0 && e.path().extension() == ".bin") paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) return make_error("data directory '", dir, "' has no ", split, "-*.bin shards; run herd data");
  return paths;
}

Result<TokenDocuments> read_split(const std::string& dir, const std::string& split) {
  HERD_ASSIGN_OR_RETURN(std::vector<std::string> paths, split_shard_paths(dir, split));
  TokenDocuments all;
  for (const std::string& p : paths) {
    HERD_ASSIGN_OR_RETURN(TokenDocuments docs, read_shard(p));
    if (all.vocab_size != 0 && docs.vocab_size != all.vocab_size) {
      return make_error(p, ": vocab size ", docs.vocab_size, " differs from ", all.vocab_size,
                        " in the split's earlier shards; regenerate the directory with one tokenizer");
    }
    all.vocab_size = docs.vocab_size;
    all.append(docs);
  }
  return all;
}

Result<DatasetMeta> read_dataset_meta(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "meta.json").string();
  HERD_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  const auto field = [&](const char* key) -> Result<std::int64_t> {
    auto v = json_int(j, "", key);
    if (!v.ok()) return v.error().with_context(path);
    return v;
  };
  DatasetMeta m;
  HERD_ASSIGN_OR_RETURN(m.vocab_size, field("vocab_size"));
  HERD_ASSIGN_OR_RETURN(const std::int64_t bos, field("bos_id"));
  HERD_ASSIGN_OR_RETURN(const std::int64_t eos, field("eos_id"));
  HERD_ASSIGN_OR_RETURN(const std::int64_t pad, field("pad_id"));
  for (const std::int64_t id : {bos, eos, pad}) {
    if (id < 0 || id >= m.vocab_size) {
      return make_error(path, ": special id ", id, " is outside the vocabulary of ", m.vocab_size,
                        "; regenerate the directory with herd data");
    }
  }
  m.bos_id = static_cast<std::int32_t>(bos);
  m.eos_id = static_cast<std::int32_t>(eos);
  m.pad_id = static_cast<std::int32_t>(pad);
  auto tok = json_string(j, "", "tokenizer");
  if (!tok.ok()) return tok.error().with_context(path);
  m.tokenizer = *tok;
  return m;
}

}  // namespace herd::data
