// Checkpoints: one directory per step, a JSON manifest and one binary file per named blob.
//
//   DIR/step_00000100/manifest.json   {"format", "step", "meta": {...}, "files": [{name, bytes, checksum}]}
//   DIR/step_00000100/<name>.bin      raw bytes (parameters, AdamW moments, ...)
//
// A save writes everything under DIR/.tmp-step_..., fsyncs each file, writes the manifest last, renames
// the directory into place and fsyncs DIR: a crash leaves either the old set of checkpoints or the new
// one, never a partial checkpoint under a step name. The newest `keep` are kept. A load re-hashes every
// file against the manifest and refuses a mismatch with one line naming the file; `load_latest` can
// fall back to the previous good checkpoint when asked (never silently).
// The checksum is a 64-bit FNV-1a over 8-byte words (corruption detection, not security).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "herd/core/error.h"
#include "herd/core/json.h"

namespace herd::train {

struct Blob {
  std::string name;  // file stem: "params" -> params.bin
  const void* data = nullptr;
  std::size_t bytes = 0;
};

std::uint64_t checksum64(const void* data, std::size_t bytes);
std::string step_dir_name(std::int64_t step);  // "step_00000100"

// Writes DIR/step_.../ atomically and prunes to the newest `keep` steps. `meta` is stored verbatim.
Status save_checkpoint(const std::string& dir, std::int64_t step, const Json& meta, const std::vector<Blob>& blobs,
                       std::int64_t keep);

struct LoadedCheckpoint {
  std::string path;  // the step directory
  std::int64_t step = 0;
  Json meta;
  std::vector<std::string> names;
  std::vector<std::vector<char>> data;  // parallel to names

  // The blob's bytes; error naming the file when missing or of another size.
  Result<const std::vector<char>*> get(const std::string& name, std::size_t expected_bytes) const;
};

// Reads and verifies one step directory.
Result<LoadedCheckpoint> load_checkpoint(const std::string& step_path);

// Step directories under DIR, newest first (empty when DIR does not exist).
std::vector<std::string> list_checkpoints(const std::string& dir);

// The newest checkpoint that verifies. A corrupt newest one is an error naming the file, unless
// `fallback`, in which case it is reported by log_warning and the next older one is tried.
// Result holds nullopt-like empty path when DIR has no checkpoints at all.
Result<LoadedCheckpoint> load_latest(const std::string& dir, bool fallback);

}  // namespace herd::train
