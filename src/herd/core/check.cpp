#include "herd/core/check.h"

#include <cstdio>
#include <cstdlib>

#include "herd/core/log.h"

namespace herd::detail {

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "%sherd: internal check failed at %s:%d: %s%s%s\n", log_prefix().c_str(), file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace herd::detail
