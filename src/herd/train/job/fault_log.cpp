// The once-per-job record of injected faults (see fault_log.h).
#include "herd/train/job/fault_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace herd::train {

std::string fault_log_path(const std::string& checkpoint_dir) {
  if (checkpoint_dir.empty()) return "";
  return (std::filesystem::path(checkpoint_dir) / "faults_fired.txt").string();
}

bool fault_fired(const std::string& checkpoint_dir, const std::string& key) {
  const std::string path = fault_log_path(checkpoint_dir);
  if (path.empty()) return false;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line == key) return true;
  }
  return false;
}

void mark_fault_fired(const std::string& checkpoint_dir, const std::string& key) {
  const std::string path = fault_log_path(checkpoint_dir);
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(checkpoint_dir, ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const std::string line = key + "\n";
  const ssize_t n = ::write(fd, line.data(), line.size());
  (void)n;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace herd::train
