// `herd train` as a user runs it: the OpenMP spin budget and the OpenBLAS kernels herd sets for itself
// (kernels/openmp_wait.h, kernels/library_env.h), said at the start of the run, and a user's own
// settings kept as given.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cli/cli_runner.h"
#include "herd/kernels/cpu/cpu_features.h"
#include "herd/kernels/library_env.h"
#include "herd/kernels/openmp_wait.h"
#include "train/parity_run_dir.h"

namespace herd::kernels {
namespace {

class OpenMpWaitCli : public herd::testing::ParityRunDir {
 protected:
  OpenMpWaitCli() : ParityRunDir("herd_openmp_wait_cli") {}
  herd::testing::CliResult train(const std::string& env) {
    return herd::testing::run_herd_env(
        env, "train " + data_and_model() +
                 " --data.seq_len=16 --train.global_batch=4 --parallel.microbatch_size=4 --train.steps=1"
                 " --eval.every=0 --eval.batches=1 --generate.samples=0");
  }
};

TEST_F(OpenMpWaitCli, HerdSetsItsBudgetAndSaysSo) {
  const auto r = train("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u HERD_OPENMP_WAIT OMP_NUM_THREADS=1");
  ASSERT_EQ(r.status, 0) << r.err;
  // The quiet host's budget, or the short one when other tests kept the cores busy at the start.
  const std::string quiet = "OpenMP wait: spin budget " + std::to_string(choose_spin(2, 1, 1, 0).spin_count) + " (";
  const std::string busy = "OpenMP wait: spin budget " + std::to_string(choose_spin(2, 1, 1, 2).spin_count) + " (";
  EXPECT_TRUE(r.out.find(quiet) != std::string::npos || r.out.find(busy) != std::string::npos) << r.out;
}

TEST_F(OpenMpWaitCli, AUsersOwnPolicyIsKept) {
  auto r = train("env -u GOMP_SPINCOUNT -u HERD_OPENMP_WAIT OMP_WAIT_POLICY=passive");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("OpenMP wait: as set, OMP_WAIT_POLICY=passive\n"), std::string::npos) << r.out;
  r = train("env -u OMP_WAIT_POLICY -u HERD_OPENMP_WAIT GOMP_SPINCOUNT=77");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("OpenMP wait: as set, GOMP_SPINCOUNT=77\n"), std::string::npos) << r.out;
}

#if HERD_HAVE_MPI
// Under `herd launch` each rank chooses its own budget from mpirun's environment: the launcher does not
// settle the libraries (cli::runs_kernels), so its one-process choice is not inherited. (It was: two
// ranks of two threads each read "1 process x 2 threads" and spun on two cores.)
TEST_F(OpenMpWaitCli, RanksUnderHerdLaunchChooseTheirOwnBudget) {
  const std::string log = (dir_ / "launch_wait.log").string();
  const std::string cmd =
      "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u HERD_OPENMP_WAIT OMP_NUM_THREADS=2 "
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 " +
      std::string(HERD_BINARY) + " launch -np 2 --bind-to none -- herd train " + data_and_model() +
      " --data.seq_len=16 --train.global_batch=4 --parallel.microbatch_size=2 --train.steps=1"
      " --eval.every=0 --eval.batches=1 --generate.samples=0 --dp 2 --checkpoint.dir=" +
      (dir_ / "launch_wait").string() + " > " + log + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << herd::testing::slurp(log);
  const std::string out = herd::testing::slurp(log);
  EXPECT_NE(out.find("OpenMP wait: spin budget "), std::string::npos) << out;
  EXPECT_NE(out.find("(2 processes x 2 threads on "), std::string::npos) << out;
  EXPECT_EQ(out.find("1 process x"), std::string::npos) << out;
}
#endif

// The header's BLAS line ("BLAS OpenBLAS 0.3.21 ... <core> MAX_THREADS=64") names the kernel set in use.
std::string blas_core_in_header(const std::string& out) {
  const std::size_t at = out.find(" MAX_THREADS=");
  if (at == std::string::npos) return "";
  const std::size_t from = out.rfind(' ', at - 1);
  return out.substr(from + 1, at - from - 1);
}

TEST_F(OpenMpWaitCli, OpenBlasNeverRunsSseKernelsOnAnAvx2Cpu) {
  const auto r = train("env -u OPENBLAS_CORETYPE -u HERD_BLAS_CORE");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("OpenBLAS kernels: "), std::string::npos) << r.out;
  const std::string core = blas_core_in_header(r.out);
  ASSERT_FALSE(core.empty()) << r.out;
  const cpu::CpuFeatures f = cpu::cpu_features();
  // Debian's OpenBLAS 0.3.21 took an Emerald Rapids Xeon for a Prescott; herd must have replaced it.
  if (f.avx2_fma) {
    EXPECT_NE(blas_core_level(core), 0) << core << "\n" << r.out;
  }
}

TEST_F(OpenMpWaitCli, AUsersOwnOpenBlasKernelsAreKept) {
  const auto r = train("env -u HERD_BLAS_CORE OPENBLAS_CORETYPE=Haswell");
  ASSERT_EQ(r.status, 0) << r.err;
  // On an AVX-512 CPU the line also says what these AVX2 kernels cost (library_env.h, user_core_note).
  const std::string note = cpu::cpu_features().avx512 ? user_core_note("Haswell", 3) : "";
  EXPECT_NE(r.out.find("OpenBLAS kernels: Haswell (as set, OPENBLAS_CORETYPE=Haswell)" + note + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(blas_core_in_header(r.out), "Haswell") << r.out;
}

}  // namespace
}  // namespace herd::kernels
