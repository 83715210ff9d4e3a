// The load-time settings of herd's libraries (library_env.h).
#include "herd/kernels/library_env.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "herd/core/cpu_isa.h"
#include "herd/kernels/cpu/cpu_features.h"
#include "herd/kernels/openmp_wait.h"

namespace herd::kernels {
namespace {

// Set on the process that re-executes with an OPENBLAS_CORETYPE herd chose, and read for the log line.
constexpr const char* kBlasMarker = "HERD_BLAS_CORE";

int this_cpu_level() {
  const cpu::CpuFeatures f = cpu::cpu_features();
  return f.avx512 ? 3 : f.avx2_fma ? 2 : 0;
}

// What OpenBLAS picked at load, "" when it does not say.
std::string detected_core() {
  const char* name = openblas_get_corename();
  return name != nullptr ? std::string(name) : std::string();
}

bool set_blas_core_env() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return false;
  const BlasCoreChoice c = choose_blas_core(detected_core(), this_cpu_level(), cpu::cpu_features().avx512_bf16);
  if (c.core.empty()) return false;
  setenv("OPENBLAS_CORETYPE", c.core.c_str(), 1);
  setenv(kBlasMarker, c.reason.c_str(), 1);
  return true;
}

void unset_blas_core_env() {
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kBlasMarker);
}

// A build for one level: each library setting forced_isa_library_env names and the user left unset.
// Returns the names it set (so that a failed re-execution can take them back).
std::vector<std::string> set_forced_isa_env() {
  std::vector<std::string> set;
  for (const auto& [name, value] : forced_isa_library_env()) {
    if (std::getenv(name.c_str()) != nullptr) continue;
    setenv(name.c_str(), value.c_str(), 1);
    set.push_back(name);
    if (name == "OPENBLAS_CORETYPE") {
      setenv(kBlasMarker, (std::string("the kernel set of this build's level, HERD_CPU_ISA=") + cpu_isa_path()).c_str(),
             1);
    }
  }
  return set;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> forced_isa_library_env() {
#if defined(HERD_CPU_FORCED)
  if (std::string(HERD_CPU_FORCED) == "x86-64-v3")
    return {{"ONEDNN_MAX_CPU_ISA", "AVX2"}, {"OPENBLAS_CORETYPE", "Haswell"}};
  return {{"ONEDNN_MAX_CPU_ISA", "SSE41"}, {"OPENBLAS_CORETYPE", "Nehalem"}};
#else
  return {};
#endif
}

std::string user_core_note(const std::string& core, int cpu_level) {
  const int level = blas_core_level(core);
  if (level < 0 || level >= cpu_level || cpu_level < 2) return "";
  const char* names[] = {"SSE", "AVX", "AVX2", "AVX-512"};
  return std::string("; warning: these are ") + names[level] + " kernels on a CPU with " + names[cpu_level] +
         ", so herd's transposed GEMMs run at " + (level + 1 == cpu_level ? "about half" : "a quarter or less of") +
         " their rate: unset OPENBLAS_CORETYPE to let OpenBLAS (and herd) choose";
}

int blas_core_level(const std::string& core) {
  for (const char* n : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (core == n) return 3;
  }
  for (const char* n : {"Haswell", "Zen"}) {
    if (core == n) return 2;
  }
  for (const char* n : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator"}) {
    if (core == n) return 1;
  }
  // OpenBLAS's SSE-only sets; Prescott is where its DYNAMIC_ARCH detection lands on an unknown Intel CPU.
  for (const char* n : {"Prescott", "Nehalem", "Core2", "Penryn", "Dunnington", "Atom", "Katmai", "Coppermine",
                        "Northwood", "Banias", "Opteron", "Opteron_SSE3", "Barcelona", "Bobcat", "Nano"}) {
    if (core == n) return 0;
  }
  return -1;
}

BlasCoreChoice choose_blas_core(const std::string& detected, int cpu_level, bool avx512_bf16) {
  if (blas_core_level(detected) != 0 || cpu_level < 2) return {"", "as detected"};
  const std::string core = cpu_level >= 3 ? (avx512_bf16 ? "Cooperlake" : "SkylakeX") : "Haswell";
  return {core, "OpenBLAS did not recognise this CPU and chose " + detected + " (SSE only); the CPU has " +
                    (cpu_level >= 3 ? "AVX-512" : "AVX2")};
}

void settle_library_env(char** argv) {
  const std::vector<std::string> forced = set_forced_isa_env();
  const bool omp = set_openmp_wait_env();
  const bool blas = set_blas_core_env();
  if (!omp && !blas && forced.empty()) return;
  execv("/proc/self/exe", argv);
  if (omp) unset_openmp_wait_env();
  if (blas) unset_blas_core_env();
  for (const std::string& name : forced) unsetenv(name.c_str());
  if (!forced.empty()) unsetenv(kBlasMarker);
}

std::string blas_core_description() {
  const std::string core = detected_core();
  const char* marker = std::getenv(kBlasMarker);
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  if (marker != nullptr && user != nullptr) return "OpenBLAS kernels: " + core + " (" + marker + ")";
  if (user != nullptr) {
    return "OpenBLAS kernels: " + core + " (as set, OPENBLAS_CORETYPE=" + user + ")" +
           user_core_note(core, this_cpu_level());
  }
  return "OpenBLAS kernels: " + core + " (as detected)";
}

}  // namespace herd::kernels
