// This machine's identity and the other processes running on it (measure/machine.h).
#include "herd/measure/machine.h"

#include <unistd.h>

#include <fstream>

#include "herd/measure/host.h"

namespace herd::measure {

namespace fs = std::filesystem;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

std::string loadavg_text() {
  std::ifstream f("/proc/loadavg");
  std::string line;
  std::getline(f, line);
  return line;
}

std::vector<std::string> runnable_processes() {
  std::vector<std::string> out;
  for (const fs::path& proc : other_processes()) {
    std::error_code ec;
    for (const auto& task : fs::directory_iterator(proc / "task", ec)) {
      const std::vector<std::string> st = stat_fields(task.path() / "stat");
      if (st.empty() || st[0] != "R") continue;
      std::ifstream comm(proc / "comm");
      std::string name;
      std::getline(comm, name);
      out.push_back(name + " (" + proc.filename().string() + ")");
      break;
    }
  }
  return out;
}

}  // namespace herd::measure
