// User errors as values.
//
// A user error (a malformed config, an impossible layout, a corrupt file) is an `Error` carrying one
// line that names the field, the value and the fix. Functions that can fail on user input return
// `Result<T>`; the CLI prints the message and exits non-zero, never with a stack trace. Bugs in herd
// are not errors but failed HERD_CHECKs (herd/core/check.h).
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "herd/core/check.h"

namespace herd {

class Error {
 public:
  explicit Error(std::string message) : message_(std::move(message)) {}
  const std::string& message() const { return message_; }

  // Prefixes context, e.g. the file being read: "cluster.json: tiers[1].size: ...".
  Error with_context(const std::string& context) const { return Error(context + ": " + message_); }

 private:
  std::string message_;
};

// Builds an Error from streamable pieces: `return make_error("tp (", tp, ") must divide ...");`.
template <typename... Args>
Error make_error(const Args&... args) {
  return Error(detail::concat(args...));
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  const T& value() const& {
    HERD_CHECK(ok(), "value() of a failed Result: ", error().message());
    return std::get<0>(v_);
  }
  T& value() & {
    HERD_CHECK(ok(), "value() of a failed Result: ", error().message());
    return std::get<0>(v_);
  }
  T&& value() && {
    HERD_CHECK(ok(), "value() of a failed Result: ", error().message());
    return std::get<0>(std::move(v_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  const Error& error() const {
    HERD_CHECK(!ok(), "error() of a successful Result");
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)
  static Status Ok() { return Status(); }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    HERD_CHECK(!ok_, "error() of a successful Status");
    return error_;
  }

 private:
  Error error_{""};
  bool ok_ = true;
};

}  // namespace herd

// Evaluates a Result/Status expression and returns its Error from the enclosing function on failure.
#define HERD_CONCAT_INNER(a, b) a##b
#define HERD_CONCAT(a, b) HERD_CONCAT_INNER(a, b)
#define HERD_RETURN_IF_ERROR(expr)                       \
  do {                                                   \
    auto herd_status_ = (expr);                          \
    if (!herd_status_.ok()) return herd_status_.error(); \
  } while (0)
#define HERD_ASSIGN_OR_RETURN(lhs, expr) HERD_ASSIGN_OR_RETURN_N(__COUNTER__, lhs, expr)
#define HERD_ASSIGN_OR_RETURN_N(n, lhs, expr) HERD_ASSIGN_OR_RETURN_IMPL(HERD_CONCAT(herd_result_, n), lhs, expr)
#define HERD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.error();               \
  lhs = std::move(tmp).value()
