// The text of an exception caught at a boundary (core/exception.h).
#include "herd/core/exception.h"

#include <cxxabi.h>

#include <cstdlib>
#include <exception>
#include <memory>
#include <typeinfo>

namespace herd {
namespace {

std::string demangled(const char* name) {
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && out != nullptr ? std::string(out.get()) : std::string(name);
}

std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

constexpr const char* kDefect = "; this is a defect in herd, please report it";

}  // namespace

std::string current_exception_message() {
  const std::exception_ptr e = std::current_exception();
  if (e == nullptr) return std::string("no exception") + kDefect;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return "uncaught " + demangled(typeid(x).name()) + ": " + one_line(x.what()) + kDefect;
  } catch (...) {
    const std::type_info* t = abi::__cxa_current_exception_type();
    return "uncaught exception of " + (t != nullptr ? "type " + demangled(t->name()) : std::string("unknown type")) +
           kDefect;
  }
}

}  // namespace herd
