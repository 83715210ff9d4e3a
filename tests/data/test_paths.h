// Where the data tests find their inputs: the Llama 3 tokenizer (fetched into assets/ by
// scripts/fetch-assets.sh, or the shared copy), the golden encodings (../shared) and the vendored corpus.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace herd::data::testing {

inline std::string llama3_tokenizer_path() {
  for (const std::string& p : {std::string(HERD_SOURCE_DIR) + "/assets/tokenizer/llama3/tokenizer.model",
                               std::string(HERD_SHARED_DIR) + "/data/tokenizer/llama3/tokenizer.model"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

inline std::string golden_dir() { return std::string(HERD_SHARED_DIR) + "/data/tokenizer/llama3"; }
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
