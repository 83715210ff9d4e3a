// libFuzzer target: a checkpoint step as resume and `herd generate` open and load it. The input is a
// manifest.json, optionally followed by a line `--shard--` and the bytes of the first file it names.
// With a shard, the harness writes that file and sets the manifest's `bytes` and `checksum` to match
// it (a fuzzer cannot forge a checksum), so the loader's piece geometry is reached: every named tensor
// is then loaded whole into fp32 buffers, as a one-rank reader would (`DistCheckpoint::load_into`).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "fuzz_util.h"
#include "herd/train/checkpoint/checkpoint.h"

namespace {

constexpr const char kSeparator[] = "\n--shard--\n";
constexpr std::int64_t kMaxLoadElements = 1 << 20;  // the reader's buffers, bounded

std::string hex64(std::uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace herd;
  const std::string input = fuzz::as_text(data, size);
  const std::size_t cut = input.find(kSeparator);
  std::string manifest = input.substr(0, cut);
  const std::filesystem::path step_dir = fuzz::scratch_dir() / "ckpt" / "step_00000010";
  std::filesystem::remove_all(step_dir);
  std::filesystem::create_directories(step_dir);
  if (cut != std::string::npos) {
    const std::string shard = input.substr(cut + sizeof(kSeparator) - 1);
    Json m = Json::parse(manifest, nullptr, /*allow_exceptions=*/false);
    if (m.is_object() && m.contains("files") && m["files"].is_array() && !m["files"].empty() &&
        m["files"][0].is_object() && m["files"][0].contains("file") && m["files"][0]["file"].is_string()) {
      const std::string name = m["files"][0]["file"].get<std::string>();
      if (!name.empty() && name.find('/') == std::string::npos && name.find("..") == std::string::npos) {
        std::ofstream(step_dir / name, std::ios::binary) << shard;
        m["files"][0]["bytes"] = static_cast<std::int64_t>(shard.size());
        m["files"][0]["checksum"] = hex64(train::checksum64(shard.data(), shard.size()));
        manifest = m.dump();
      }
    }
  }
  std::ofstream(step_dir / "manifest.json", std::ios::binary) << manifest;
  Result<train::DistCheckpoint> ck = train::open_dist_checkpoint(step_dir.string());
  if (ck.ok() && ck->manifest["elem"] == "fp32") {
    // Every tensor the manifest names, whole, with the shape of its first piece.
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> shapes;
    for (const Json& f : ck->manifest["files"]) {
      for (const Json& p : f["pieces"]) {
        shapes.emplace(p["name"].get<std::string>(),
                       std::make_pair(p["rows"].get<std::int64_t>(), p["cols"].get<std::int64_t>()));
      }
    }
    std::int64_t total = 0;
    for (const auto& [name, rc] : shapes)
      total += rc.first <= kMaxLoadElements / rc.second ? rc.first * rc.second : kMaxLoadElements + 1;
    if (total <= kMaxLoadElements) {
      std::vector<float> buf(static_cast<std::size_t>(3 * total));
      std::vector<parallel::ShardPiece<float>> pieces;
      std::int64_t at = 0;
      for (const auto& [name, rc] : shapes) {
        parallel::ShardPiece<float> p;
        p.name = name;
        p.rows = rc.first;
        p.cols = rc.second;
        p.r1 = p.rows;
        p.c1 = p.cols;
        p.e1 = p.rows * p.cols;
        p.param = buf.data() + at;
        p.m = buf.data() + total + at;
        p.v = buf.data() + 2 * total + at;
        at += p.e1;
        pieces.push_back(p);
      }
      (void)ck->load_into(pieces);
    }
  }
  Result<std::optional<train::DistCheckpoint>> latest =
      train::open_latest_checkpoint(step_dir.parent_path().string(), /*fallback=*/true);
  (void)latest;
  return 0;
}
