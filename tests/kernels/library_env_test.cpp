// OpenBLAS's kernel set (kernels/library_env.h): which detected sets are fallbacks, and what replaces
// them. `herd train` applying it: tests/train/openmp_wait_cli_test.cpp.
#include "herd/kernels/library_env.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include "herd/kernels/cpu/cpu_features.h"

namespace herd::kernels {
namespace {

TEST(BlasCore, LevelsFollowTheInstructionSets) {
  EXPECT_EQ(blas_core_level("Prescott"), 0);
  EXPECT_EQ(blas_core_level("Nehalem"), 0);
  EXPECT_EQ(blas_core_level("Sandybridge"), 1);
  EXPECT_EQ(blas_core_level("Haswell"), 2);
  EXPECT_EQ(blas_core_level("Zen"), 2);
  EXPECT_EQ(blas_core_level("SkylakeX"), 3);
  EXPECT_EQ(blas_core_level("Cooperlake"), 3);
  EXPECT_EQ(blas_core_level("SapphireRapids"), 3);
  EXPECT_EQ(blas_core_level("SomethingNew"), -1);
  EXPECT_EQ(blas_core_level(""), -1);
}

TEST(BlasCore, AnSseFallbackOnAModernCpuIsReplaced) {
  // OpenBLAS 0.3.21 on an Emerald Rapids Xeon (AVX-512 with BF16, no AMX exposed) picked Prescott.
  BlasCoreChoice c = choose_blas_core("Prescott", 3, true);
  EXPECT_EQ(c.core, "Cooperlake");
  EXPECT_NE(c.reason.find("chose Prescott (SSE only); the CPU has AVX-512"), std::string::npos) << c.reason;
  EXPECT_EQ(choose_blas_core("Prescott", 3, false).core, "SkylakeX");
  EXPECT_EQ(choose_blas_core("Nehalem", 2, false).core, "Haswell");
  EXPECT_EQ(choose_blas_core("Core2", 3, true).core, "Cooperlake");
}

TEST(BlasCore, WhatOpenBlasChoseForACpuItKnowsIsKept) {
  // Zen 4 has AVX-512, but OpenBLAS's Zen kernels for it are its own judgement, as on every known CPU.
  EXPECT_EQ(choose_blas_core("Zen", 3, true).core, "");
  EXPECT_EQ(choose_blas_core("Haswell", 3, false).core, "");
  EXPECT_EQ(choose_blas_core("SapphireRapids", 3, true).core, "");
  // An SSE-only CPU keeps OpenBLAS's SSE kernels: nothing better exists for it.
  EXPECT_EQ(choose_blas_core("Prescott", 0, false).core, "");
  EXPECT_EQ(choose_blas_core("Sandybridge", 1, false).core, "");
  // A kernel set a newer OpenBLAS names, or no name at all, is not second-guessed.
  EXPECT_EQ(choose_blas_core("Zen4", 3, true).core, "");
  EXPECT_EQ(choose_blas_core("", 3, true).core, "");
}

TEST(BlasCore, AUsersSetBelowTheCpuIsKeptButNamedWithItsCost) {
  // OPENBLAS_CORETYPE=Haswell in the environment of an AMD EPYC (Zen 5, AVX-512): the small model's fp32
  // step ran 19% slower than with the set OpenBLAS chose itself (docs/kernels.md).
  const std::string note = user_core_note("Haswell", 3);
  EXPECT_NE(note.find("AVX2 kernels on a CPU with AVX-512"), std::string::npos) << note;
  EXPECT_NE(note.find("about half their rate"), std::string::npos) << note;
  EXPECT_NE(note.find("unset OPENBLAS_CORETYPE"), std::string::npos) << note;
  EXPECT_NE(user_core_note("Prescott", 2).find("a quarter or less"), std::string::npos);
  EXPECT_EQ(user_core_note("SkylakeX", 3), "");
  EXPECT_EQ(user_core_note("Haswell", 2), "");
  EXPECT_EQ(user_core_note("SomethingNew", 3), "");  // a name this list does not know: no claim
  EXPECT_EQ(user_core_note("Prescott", 0), "");      // nothing better exists for an SSE-only CPU
}

TEST(BlasCore, FeaturesAreConsistent) {
  const cpu::CpuFeatures f = cpu::cpu_features();
  EXPECT_TRUE(!f.avx512 || f.avx2_fma);  // every AVX-512 CPU has AVX2 and FMA
  EXPECT_TRUE(!f.avx512_bf16 || f.avx512);
  EXPECT_NE(openblas_get_corename(), nullptr);
}

}  // namespace
}  // namespace herd::kernels
