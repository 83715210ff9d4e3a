// The command boundary (cli::run_guarded, which run_cli runs every command through): whatever a command
// throws, from herd or from a library under it, ends as one line "herd <command>: error: ..." and a
// non-zero status, never std::terminate's abort.
#ifdef HERD_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

#include "herd/cli/app.h"
#include "herd/core/aligned.h"

namespace herd::cli {
namespace {

struct Outcome {
  int status = 0;
  std::string err;
};

Outcome guarded(const std::string& command, const std::function<int()>& run) {
  ::testing::internal::CaptureStderr();
  Outcome o;
  o.status = run_guarded(command, run);
  o.err = ::testing::internal::GetCapturedStderr();
  return o;
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(CommandBoundary, ACommandThatReturnsKeepsItsStatusAndSaysNothing) {
  const Outcome o = guarded("plan", [] { return 3; });
  EXPECT_EQ(o.status, 3);
  EXPECT_EQ(o.err, "");
}

TEST(CommandBoundary, AStandardExceptionIsOneErrorLineNamingItsTypeAndText) {
  const Outcome o = guarded("train", []() -> int { throw std::runtime_error("the disk\nwent away"); });
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err,
            "herd train: error: uncaught std::runtime_error: the disk went away; this is a defect in herd, please "
            "report it\n");
}

TEST(CommandBoundary, AnExceptionOfAnyTypeIsOneErrorLine) {
  const Outcome o = guarded("generate", []() -> int { throw 42; });
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err.rfind("herd generate: error: uncaught exception of type int;", 0), 0u) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
}

TEST(CommandBoundary, RunningOutOfMemoryNamesTheBytesAndTheFix) {
  const Outcome o = guarded("estimate", []() -> int { throw AllocationFailed(1 << 20); });
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("herd estimate: error: out of memory: an allocation of "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("(1048576 bytes) failed; use a smaller model"), std::string::npos) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
}

#ifdef HERD_HAVE_DNNL
// A library's own exception: oneDNN throws dnnl::error for a primitive it cannot create, as it does for
// a bf16 matmul on a CPU without bf16 instructions. A memory descriptor of negative size throws on every CPU.
TEST(CommandBoundary, ALibrarysExceptionIsOneErrorLine) {
  const Outcome o = guarded("calibrate", []() -> int {
    const dnnl::memory::desc bad({-1, 4}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
    return bad.get_size() > 0 ? 0 : 2;
  });
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err.rfind("herd calibrate: error: uncaught dnnl::error: ", 0), 0u) << o.err;
  EXPECT_EQ(lines(o.err), 1) << o.err;
}
#endif

}  // namespace
}  // namespace herd::cli
