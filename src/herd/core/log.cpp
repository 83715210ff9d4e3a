#include "herd/core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace herd {
namespace {
thread_local int g_rank = -1;
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mutex;
}  // namespace

void set_log_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank; }
void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }

std::string log_prefix() { return g_rank < 0 ? std::string() : "[herd r" + std::to_string(g_rank) + "] "; }

void log_line(LogLevel level, const std::string& line) {
  if (static_cast<int>(level) < g_level.load()) return;
  static const char* const kTags[] = {"debug: ", "", "warning: ", "error: "};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s%s%s\n", log_prefix().c_str(), kTags[static_cast<int>(level)], line.c_str());
}

}  // namespace herd
