// cli::runs_kernels: which herd processes settle the libraries' load-time settings (main.cpp).
#include <gtest/gtest.h>

#include "herd/cli/app.h"

namespace herd::cli {
namespace {

bool runs(std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {"herd"};
  argv.insert(argv.end(), args.begin(), args.end());
  return runs_kernels(static_cast<int>(argv.size()), argv.data());
}

TEST(RunsKernels, OnlyTheCommandsThatRunKernelsInThisProcess) {
  EXPECT_TRUE(runs({"train", "run.json"}));
  EXPECT_TRUE(runs({"generate"}));
  EXPECT_TRUE(runs({"calibrate", "--out", "c.json"}));
  // The launcher's ranks settle for themselves; the planner and the tools run no kernels.
  EXPECT_FALSE(runs({"launch", "-np", "2", "--", "herd", "train"}));
  for (const char* c : {"model", "estimate", "plan", "schedule", "data", "convert", "plot", "trace", "--help"}) {
    EXPECT_FALSE(runs({c})) << c;
  }
  EXPECT_FALSE(runs({}));
}

}  // namespace
}  // namespace herd::cli
