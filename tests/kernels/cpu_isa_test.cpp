// The kernels' ISA path (core/cpu_isa.h). tests/CMakeLists.txt runs this executable once natively and,
// where qemu-x86_64 is installed, again on emulated CPUs without AVX-512 and without AVX, setting
// HERD_EXPECT_CPU_ISA to the path each must take: the same kernel tests then pass on every clone.
#include "herd/core/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace herd {
namespace {

TEST(CpuIsa, TakesTheExpectedPath) {
  const char* want = std::getenv("HERD_EXPECT_CPU_ISA");
  if (want == nullptr) GTEST_SKIP() << "runs the " << cpu_isa_path() << " path; HERD_EXPECT_CPU_ISA unset";
  EXPECT_EQ(std::string(cpu_isa_path()), want);
}

TEST(CpuIsa, DefaultBuildDispatchesAtRunTime) {
#if defined(HERD_CPU_NATIVE)
  GTEST_SKIP() << "built with -DHERD_NATIVE=ON";
#else
  EXPECT_EQ(HERD_CPU_DISPATCH, 1);
  EXPECT_EQ(std::string(cpu_isa_path()).rfind("x86-64", 0), 0u) << cpu_isa_path();
#endif
}

}  // namespace
}  // namespace herd
