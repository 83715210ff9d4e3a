// A directory under the system's temporary directory, named for the test and its process, emptied when
// made and removed when the test ends.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace herd::testing {

struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

}  // namespace herd::testing
