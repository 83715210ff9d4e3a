// Rank-aware logging.
//
// Every line starts with "[herd rN] " once a rank is set for the calling thread (ranks run as threads
// under the local communicator, so the rank is thread-local), and with nothing on single-rank runs.
// Logs go to stderr; results a user asked for (tables, JSON) go to stdout.
#pragma once

#include <string>

#include "herd/core/check.h"

namespace herd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void set_log_rank(int rank);  // -1: no rank prefix (the default).
int log_rank();
void set_log_level(LogLevel level);
std::string log_prefix();
void log_line(LogLevel level, const std::string& line);

template <typename... Args>
void log_info(const Args&... args) {
  log_line(LogLevel::kInfo, detail::concat(args...));
}
template <typename... Args>
void log_warning(const Args&... args) {
  log_line(LogLevel::kWarning, detail::concat(args...));
}
template <typename... Args>
void log_debug(const Args&... args) {
  log_line(LogLevel::kDebug, detail::concat(args...));
}

}  // namespace herd
