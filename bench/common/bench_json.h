// The envelope every benchmark writes: {"figure", "machine", "commit", "date", "results": [...]}.
// The machine is described by what the OS reports (CPU model, cores, memory), so results from
// different machines are never compared by accident, and by the instruction-set path herd's CPU
// kernels took on it ("kernel_isa": x86-64-v4 / x86-64-v3 / x86-64 under runtime dispatch, or
// "native" for a -DHERD_NATIVE=ON build; core/cpu_isa.h).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "herd/core/cores.h"
#include "herd/core/cpu_isa.h"
#include "herd/core/json.h"

#ifndef HERD_GIT_COMMIT
#define HERD_GIT_COMMIT "unknown"
#endif
#ifndef HERD_SOURCE_DIR
#define HERD_SOURCE_DIR "."
#endif

namespace herd::bench {

inline Json machine_description() {
  Json m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      m["cpu"] = line.substr(line.find(':') + 2);
      break;
    }
  }
  // The cores this process may run on (core/cores.h, what herd sizes its teams by), and the machine's.
  m["cores"] = herd::usable_cores();
  m["cpus_online"] = std::thread::hardware_concurrency();
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  m["memory_gib"] = static_cast<double>(pages) * static_cast<double>(page_size) / (1024.0 * 1024 * 1024);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  m["host"] = host;
  m["kernel_isa"] = cpu_isa_path();
  return m;
}

// The checkout's commit now (with "-dirty" when tracked files differ from it), or the one the build
// was configured at when git cannot be run.
inline std::string current_commit() {
  const std::string git = std::string("git -C '") + HERD_SOURCE_DIR + "' ";
  auto run = [](const std::string& cmd) {
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[128];
      while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
      if (::pclose(p) != 0) return std::string();
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  };
  std::string commit = run(git + "rev-parse --short HEAD 2>/dev/null");
  if (commit.empty()) return HERD_GIT_COMMIT;
  if (!run(git + "status --porcelain --untracked-files=no 2>/dev/null").empty()) commit += "-dirty";
  return commit;
}

inline Json envelope(const std::string& figure) {
  Json j;
  j["figure"] = figure;
  j["machine"] = machine_description();
  j["commit"] = current_commit();
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  j["date"] = buf;
  j["results"] = Json::array();
  return j;
}

// Writes the document to `path` (or stdout when empty) and echoes a one-line summary to stderr.
inline void write_result(const Json& doc, const std::string& path) {
  if (path.empty()) {
    std::cout << doc.dump(2) << "\n";
    return;
  }
  std::ofstream out(path);
  out << doc.dump(2) << "\n";
  std::cerr << "wrote " << path << "\n";
}

}  // namespace herd::bench
