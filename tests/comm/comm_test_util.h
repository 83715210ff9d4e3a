// Helpers for the comm tests: run N ranks as threads with short, test-sized timeouts.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "herd/comm/local/local_world.h"

namespace herd::comm::testing {

inline CommOptions test_options(double timeout_s = 60.0) {
  CommOptions o;
  o.timeout_s = timeout_s;
  o.deterministic = true;
  o.dump_dir = (std::filesystem::temp_directory_path() / "herd_comm_tests").string();
  return o;
}

// Runs fn on n rank threads and fails the test with the first rank's error.
inline void run_ranks(int n, const std::function<Status(Communicator&)>& fn, double timeout_s = 60.0) {
  LocalWorld world(n, test_options(timeout_s));
  const Status s = first_error(world.run(fn));
  EXPECT_TRUE(s.ok()) << s.error().message();
}

// Turns a failed expectation inside a rank into an error value so the other ranks are not left waiting.
#define COMM_EXPECT(cond, ...)                                                                           \
  do {                                                                                                   \
    if (!(cond)) return ::herd::make_error("expectation failed: " #cond " " __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

}  // namespace herd::comm::testing
