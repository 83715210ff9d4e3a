// Always-on and debug-only invariant checks.
//
// HERD_CHECK guards invariants whose violation is a bug in herd (not a user mistake): it prints
// file:line, the failed expression and an optional message built from the extra arguments, then
// aborts. HERD_DCHECK is the same in debug builds and compiles to nothing under NDEBUG. User errors
// (bad config, bad file, impossible layout) are values: see herd/core/error.h.
#pragma once

#include <sstream>
#include <string>

namespace herd::detail {

[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace herd::detail

#define HERD_CHECK(cond, ...)                                                                                         \
  do {                                                                                                                \
    if (!(cond)) [[unlikely]] {                                                                                       \
      ::herd::detail::check_failed(__FILE__, __LINE__, #cond, ::herd::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                                                 \
  } while (0)

#ifdef NDEBUG
#define HERD_DCHECK(cond, ...) \
  do {                         \
  } while (0)
#else
#define HERD_DCHECK(cond, ...) HERD_CHECK(cond __VA_OPT__(, ) __VA_ARGS__)
#endif
