// Reader for the golden files tools/llama_golden.py writes: b"HERDGOLD", a uint64 header length, a
// JSON header (config, optimizer, scalar results, and each tensor's name, dtype, shape, byte offset),
// then the raw little-endian data.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "herd/core/check.h"
#include "herd/core/json.h"
#include "herd/model/config.h"
#include "herd/nn/batch.h"

namespace herd::testing {

struct GoldenFile {
  Json header;
  std::map<std::string, std::vector<float>> f32;
  std::map<std::string, std::vector<std::int32_t>> i32;

  static Result<GoldenFile> read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(path, ": cannot open");
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() < 16 || std::memcmp(bytes.data(), "HERDGOLD", 8) != 0)
      return make_error(path, ": not a golden file");
    std::uint64_t len = 0;
    std::memcpy(&len, bytes.data() + 8, 8);
    HERD_ASSIGN_OR_RETURN(Json h, parse_json_text(std::string(bytes.data() + 16, len), path));
    GoldenFile g;
    g.header = h;
    const char* data = bytes.data() + 16 + len;
    for (const Json& t : h["tensors"]) {
      std::size_t n = 1;
      for (const Json& d : t["shape"]) n *= d.get<std::size_t>();
      const std::size_t off = t["offset"].get<std::size_t>();
      if (16 + len + off + 4 * n > bytes.size()) return make_error(path, ": truncated at ", t["name"]);
      if (t["dtype"] == "f32") {
        std::vector<float> v(n);
        std::memcpy(v.data(), data + off, 4 * n);
        g.f32[t["name"]] = std::move(v);
      } else {
        std::vector<std::int32_t> v(n);
        std::memcpy(v.data(), data + off, 4 * n);
        g.i32[t["name"]] = std::move(v);
      }
    }
    return g;
  }
};

// A committed golden file under tests/train/golden/, read once per process (a bad file stops the test).
inline const GoldenFile& golden_file(const std::string& name) {
  static std::map<std::string, GoldenFile> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Result<GoldenFile> r = GoldenFile::read(std::string(HERD_SOURCE_DIR) + "/tests/train/golden/" + name);
    HERD_CHECK(r.ok(), r.error().message());
    it = cache.emplace(name, std::move(*r)).first;
  }
  return it->second;
}

// The model the golden file's tools/ script built (its header's "config").
inline model::LlamaConfig golden_model_config(const GoldenFile& g) {
  const Json& c = g.header["config"];
  model::LlamaConfig cfg;
  cfg.name = "golden";
  cfg.hidden = c["hidden"];
  cfg.ffn_hidden = c["ffn_hidden"];
  cfg.n_layers = c["n_layers"];
  cfg.n_heads = c["n_heads"];
  cfg.n_kv_heads = c["n_kv_heads"];
  cfg.head_dim = c["head_dim"];
  cfg.vocab = c["vocab"];
  cfg.max_seq_len = c["seq_len"];
  cfg.rope_theta = c["rope_theta"];
  cfg.norm_eps = c["norm_eps"];
  return cfg;
}

// The golden packed batch (its arrays stay in the file's buffers).
inline nn::MicroBatch golden_batch(const GoldenFile& g) {
  nn::MicroBatch mb;
  mb.batch = g.header["config"]["batch"];
  mb.seq_len = g.header["config"]["seq_len"];
  mb.tokens = g.i32.at("batch.tokens").data();
  mb.targets = g.i32.at("batch.targets").data();
  mb.positions = g.i32.at("batch.positions").data();
  mb.doc_ids = g.i32.at("batch.doc_ids").data();
  return mb;
}

// max |got - want| / max |want|: the error of a tensor relative to the golden tensor's scale.
template <typename T>
double max_relative_error(const T* got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

}  // namespace herd::testing
