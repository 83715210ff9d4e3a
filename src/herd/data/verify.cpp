// meta.json against the shards of a `herd data` directory (contract in the header).
#include "herd/data/verify.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "herd/core/json.h"
#include "herd/data/shard.h"

namespace herd::data {

namespace {

namespace fs = std::filesystem;

// The shards of `split` present in `dir`, by file name, sorted ("train-00000.bin", ...).
std::vector<std::string> shards_on_disk(const std::string& dir, const std::string& split) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(split + "-", 0) == 0 && e.path().extension() == ".bin") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

const char* const kFix = "; regenerate the directory with herd data";

Result<VerifiedSplit> verify_split(const std::string& dir, const std::string& meta_path, const Json& splits,
                                   const std::string& name, std::int64_t vocab_size) {
  const std::string where = "splits." + name;
  const Json& s = splits[name];
  if (!s.is_object()) return make_error(meta_path, ": ", where, ": expected an object, got ", json_preview(s), kFix);
  const auto field = [&](const char* key) -> Result<std::int64_t> {
    Result<std::int64_t> v = json_int(s, where, key);
    if (!v.ok()) return v.error().with_context(meta_path);
    if (*v < 0) return make_error(meta_path, ": ", where, ".", key, ": must be >= 0, got ", *v, kFix);
    return v;
  };
  VerifiedSplit out;
  out.name = name;
  HERD_ASSIGN_OR_RETURN(const std::int64_t documents, field("documents"));
  HERD_ASSIGN_OR_RETURN(const std::int64_t tokens, field("tokens"));
  if (!s.contains("shards") || !s["shards"].is_array() || s["shards"].empty()) {
    return make_error(meta_path, ": ", where, ".shards: expected a non-empty list of shard file names", kFix);
  }
  for (const Json& f : s["shards"]) {
    if (!f.is_string()) {
      return make_error(meta_path, ": ", where, ".shards: expected file names, got ", json_preview(f), kFix);
    }
    out.shards.push_back(f.get<std::string>());
  }
  std::vector<std::string> listed = out.shards;
  std::sort(listed.begin(), listed.end());
  const std::vector<std::string> present = shards_on_disk(dir, name);
  for (const std::string& f : listed) {
    if (!std::binary_search(present.begin(), present.end(), f)) {
      return make_error((fs::path(dir) / f).string(), ": missing, but meta.json lists it in ", where, ".shards", kFix);
    }
  }
  for (const std::string& f : present) {
    if (!std::binary_search(listed.begin(), listed.end(), f)) {
      return make_error((fs::path(dir) / f).string(), ": not listed in meta.json's ", where,
                        ".shards (left from another run?); remove it or regenerate the directory with herd data");
    }
  }
  for (const std::string& f : out.shards) {
    const std::string path = (fs::path(dir) / f).string();
    HERD_ASSIGN_OR_RETURN(TokenDocuments docs, read_shard(path));
    if (docs.vocab_size != vocab_size) {
      return make_error(path, ": vocab size ", docs.vocab_size, " but meta.json says ", vocab_size, kFix);
    }
    out.documents += docs.n_docs();
    out.tokens += docs.n_tokens();
  }
  out.vocab_size = vocab_size;
  if (out.documents != documents || out.tokens != tokens) {
    return make_error(meta_path, ": ", where, " says ", documents, " documents and ", tokens,
                      " tokens but its shards hold ", out.documents, " and ", out.tokens, kFix);
  }
  return out;
}

}  // namespace

Result<std::uint32_t> file_crc32(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return make_error(path, ": cannot open file; check the path");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path, ": cannot open file; check the path");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return make_error(path, ": read failed");
  return crc32(bytes.data(), bytes.size());
}

Status check_tokenizer_checksum(const std::string& dir, const std::string& path, const std::string& field) {
  const std::string meta_path = (fs::path(dir) / "meta.json").string();
  std::error_code ec;
  // A tokenizer that is not a file here is the tokenizer loader's to refuse.
  if (!fs::exists(meta_path, ec) || !fs::is_regular_file(path, ec)) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(const Json j, read_json_file(meta_path));
  if (!j.is_object() || !j.contains("tokenizer_crc32")) return Status::Ok();
  HERD_ASSIGN_OR_RETURN(const std::int64_t want, json_int(j, meta_path, "tokenizer_crc32"));
  HERD_ASSIGN_OR_RETURN(const std::uint32_t got, file_crc32(path));
  if (static_cast<std::int64_t>(got) != want) {
    return make_error(field, " '", path, "': CRC-32 ", got, " differs from tokenizer_crc32 ", want, " in ", meta_path,
                      ": the shards were made with another tokenizer file; give the one they were made with");
  }
  return Status::Ok();
}

Result<std::vector<VerifiedSplit>> verify_dataset(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error("data directory '", dir, "' does not exist; create it with herd data --output ", dir);
  }
  const std::string meta_path = (fs::path(dir) / "meta.json").string();
  if (!fs::exists(meta_path, ec)) return make_error(meta_path, ": missing", kFix);
  // The ids and the vocabulary, as every consumer reads them (errors name the file and the field).
  HERD_ASSIGN_OR_RETURN(const DatasetMeta meta, read_dataset_meta(dir));
  HERD_ASSIGN_OR_RETURN(const Json j, read_json_file(meta_path));
  if (!j.contains("splits") || !j["splits"].is_object()) {
    return make_error(meta_path, ": splits: expected an object with the train (and val) split", kFix);
  }
  const Json& splits = j["splits"];
  for (const auto& [name, value] : splits.items()) {
    if (name != "train" && name != "val") return make_error(meta_path, ": splits.", name, ": unknown split", kFix);
  }
  if (!splits.contains("train")) return make_error(meta_path, ": splits.train: missing", kFix);
  std::vector<VerifiedSplit> out;
  for (const char* name : {"train", "val"}) {
    if (!splits.contains(name)) {
      if (!shards_on_disk(dir, name).empty()) {
        return make_error(dir, ": has ", name, "-*.bin shards but meta.json lists no ", name, " split", kFix);
      }
      continue;
    }
    HERD_ASSIGN_OR_RETURN(VerifiedSplit s, verify_split(dir, meta_path, splits, name, meta.vocab_size));
    out.push_back(std::move(s));
  }
  // The tokenizer the shards were made with, where it still is: the same file, byte for byte.
  if (fs::is_regular_file(meta.tokenizer, ec)) {
    HERD_RETURN_IF_ERROR(check_tokenizer_checksum(dir, meta.tokenizer, meta_path + ": tokenizer"));
  }
  return out;
}

}  // namespace herd::data
