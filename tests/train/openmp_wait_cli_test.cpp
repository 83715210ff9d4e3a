// `herd train` as a user runs it: the OpenMP spin budget herd sets for itself (kernels/openmp_wait.h),
// said at the start of the run, and a user's own wait policy kept as given.
#include <gtest/gtest.h>

#include "cli/cli_runner.h"
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
  EXPECT_NE(r.out.find("OpenMP wait: spin budget " + std::to_string(choose_spin(1, 1, 1).spin_count) + " ("),
            std::string::npos)
      << r.out;
}

TEST_F(OpenMpWaitCli, AUsersOwnPolicyIsKept) {
  auto r = train("env -u GOMP_SPINCOUNT -u HERD_OPENMP_WAIT OMP_WAIT_POLICY=passive");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("OpenMP wait: as set, OMP_WAIT_POLICY=passive\n"), std::string::npos) << r.out;
  r = train("env -u OMP_WAIT_POLICY -u HERD_OPENMP_WAIT GOMP_SPINCOUNT=77");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("OpenMP wait: as set, GOMP_SPINCOUNT=77\n"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace herd::kernels
