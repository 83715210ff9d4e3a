// Where the data tests find their inputs: the Llama 3 tokenizer (not committed: its licence is Meta's;
// scripts/fetch-assets.sh installs it in assets/), and the vendored golden encodings
// (tests/fixtures/tokenizer/llama3/, provenance in its NOTICE.md) and corpus (corpus/).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace herd::data::testing {

// Empty when scripts/fetch-assets.sh has not run.
inline std::string llama3_tokenizer_path() {
  const std::string p = std::string(HERD_SOURCE_DIR) + "/assets/tokenizer/llama3/tokenizer.model";
  return std::filesystem::exists(p) ? p : "";
}

inline std::string golden_dir() { return std::string(HERD_SOURCE_DIR) + "/tests/fixtures/tokenizer/llama3"; }
inline std::string corpus_path() { return std::string(HERD_SOURCE_DIR) + "/corpus/sotu.jsonl.xz"; }

// A fresh empty directory under the system temp dir, unique per test.
inline std::filesystem::path temp_dir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("herd_data_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace herd::data::testing
