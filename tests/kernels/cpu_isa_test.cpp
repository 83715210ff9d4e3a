// The kernels' ISA path (core/cpu_isa.h). tests/CMakeLists.txt runs this executable once natively and,
// where qemu-x86_64 is installed, again on emulated CPUs without AVX-512 and without AVX, setting
// HERD_EXPECT_CPU_ISA to the path each must take: the same kernel tests then pass on every clone.
#include "herd/core/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "herd/kernels/cpu/cpu_features.h"
#include "herd/kernels/gemm.h"
#include "herd/kernels/library_env.h"

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
#elif defined(HERD_CPU_FORCED)
  GTEST_SKIP() << "built with -DHERD_CPU_ISA=" << HERD_CPU_FORCED;
#elif defined(__clang__)
  GTEST_SKIP() << "built by clang (the sanitizer tree): the per-ISA clones are GCC's target_clones";
#else
  EXPECT_EQ(HERD_CPU_DISPATCH, 1);
  EXPECT_EQ(std::string(cpu_isa_path()).rfind("x86-64", 0), 0u) << cpu_isa_path();
#endif
}

// A build for one level runs that level's code and nothing above it, whatever the CPU has: no clones,
// no AVX-512 (so no bf16 micro-GEMM or AMX), and for the baseline no AVX2 either.
TEST(CpuIsa, AForcedLevelIsTheOnlyPathAndCapsTheFeatures) {
#if !defined(HERD_CPU_FORCED)
  GTEST_SKIP() << "runtime dispatch; cmake -DHERD_CPU_ISA=x86-64-v3 or x86-64 builds one level";
#else
  EXPECT_EQ(HERD_CPU_DISPATCH, 0);
  EXPECT_EQ(std::string(cpu_isa_path()), HERD_CPU_FORCED);
  const kernels::cpu::CpuFeatures f = kernels::cpu::cpu_features();
  EXPECT_FALSE(f.avx512);
  EXPECT_FALSE(f.avx512_bf16);
  EXPECT_FALSE(f.amx_bf16);
  if (std::string(HERD_CPU_FORCED) == "x86-64") {
    EXPECT_FALSE(f.avx2_fma);
  }
  EXPECT_FALSE(kernels::cpu_has_bf16());
  // The libraries are held to the level: the settings herd gives them, which ctest sets for each test.
  for (const auto& [name, value] : kernels::forced_isa_library_env()) {
    const char* got = std::getenv(name.c_str());
    ASSERT_NE(got, nullptr) << name;
    EXPECT_EQ(std::string(got), value) << name;
  }
  EXPECT_EQ(kernels::forced_isa_library_env().size(), 2u);
#endif
}

}  // namespace
}  // namespace herd
