// The backend from how the process was started (train::resolve_launch): MPI under mpirun and srun with
// PMIx, ranks as threads without a launcher, and one line naming the launcher and what to run instead
// where several processes were started without MPI.
#include <gtest/gtest.h>

#include "herd/train/job/job.h"

namespace herd::train {
namespace {

TrainConfig with_backend(const std::string& backend) {
  TrainConfig cfg;
  cfg.parallel.backend = backend;
  return cfg;
}

const Environment kMpirun = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
const Environment kSrunPmix = {
    {"PMIX_RANK", "2"},     {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "2"},    {"SLURM_NTASKS", "4"},
    {"SLURM_LOCALID", "2"}, {"SLURM_NODEID", "0"},  {"SLURM_NODELIST", "vm"}, {"SLURM_STEP_TASKS_PER_NODE", "4"}};
const Environment kSlurm = {{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}};
const Environment kTorchrun = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}};

std::string error_of(const std::string& backend, const Environment& env) {
  const Result<JobLaunch> r = resolve_launch(with_backend(backend), env);
  return r.ok() ? std::string("(no error)") : r.error().message();
}

TEST(ResolveLaunch, MpiLaunchersRunTheMpiBackend) {
  for (const Environment& env : {kMpirun, kSrunPmix}) {
    for (const char* backend : {"auto", "mpi"}) {
      const JobLaunch j = *resolve_launch(with_backend(backend), env);
      EXPECT_EQ(j.backend, comm::Backend::kMpi) << backend;
      EXPECT_TRUE(j.env.mpi());
    }
  }
  const JobLaunch srun = *resolve_launch(with_backend("auto"), kSrunPmix);
  EXPECT_EQ(srun.env.source, LaunchSource::kSrunMpi);
  EXPECT_EQ(srun.env.rank, 2);
  EXPECT_EQ(srun.env.world_size, 4);
  EXPECT_FALSE(srun.lead());
  EXPECT_TRUE(resolve_launch(with_backend("auto"), {})->lead());
}

TEST(ResolveLaunch, NoLauncherOrAWorldOfOneRunsRanksAsThreads) {
  for (const Environment& env :
       {Environment{}, Environment{{"SLURM_STEP_ID", "3"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}},
        Environment{{"RANK", "0"}, {"WORLD_SIZE", "1"}}}) {
    const JobLaunch j = *resolve_launch(with_backend("auto"), env);
    EXPECT_EQ(j.backend, comm::Backend::kLocal);
    EXPECT_TRUE(j.lead());
  }
}

TEST(ResolveLaunch, SeveralProcessesWithoutMpiNameTheLauncherAndTheFix) {
  const std::string slurm =
      "srun started 4 tasks without PMIx (SLURM_PROCID=0 SLURM_NTASKS=4, no PMIX_RANK), and herd's processes talk "
      "over MPI, which needs it; run srun --mpi=pmix herd train ... (or MpiDefault=pmix in slurm.conf), mpirun -np 4 "
      "herd train ... inside the allocation, or herd launch -np 4 -- herd train ...";
  EXPECT_EQ(error_of("auto", kSlurm), slurm);
  EXPECT_EQ(error_of("mpi", kSlurm), slurm);
  EXPECT_EQ(error_of("auto", kTorchrun),
            "torchrun started 2 processes (RANK=0 WORLD_SIZE=2), and herd's processes talk over MPI only; run mpirun "
            "-np 2 herd train ..., herd launch -np 2 -- herd train ..., or under Slurm srun --mpi=pmix herd train ...");
}

TEST(ResolveLaunch, BackendsThatDoNotFitTheLauncherAreRefused) {
  EXPECT_EQ(error_of("mpi", {}),
            "parallel.backend=mpi but this process was not started by mpirun or srun --mpi=pmix; run it as `mpirun -np "
            "N herd train ...` or use parallel.backend=local");
  EXPECT_EQ(error_of("local", kSrunPmix),
            "parallel.backend=local runs every rank as a thread of this process, but srun with PMIx started 4 "
            "processes (PMIX_RANK=2 SLURM_PROCID=2 SLURM_NTASKS=4), each of which would run the whole job; start one "
            "process, or set parallel.backend=auto");
}

TEST(ResolveLaunch, ConflictingVariablesStopAutoButNotAnExplicitLocalJob) {
  const Environment conflict = {
      {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}};
  EXPECT_NE(error_of("auto", conflict).find("SLURM_PROCID=1 but RANK=0: two launchers disagree"), std::string::npos);
  EXPECT_EQ(resolve_launch(with_backend("local"), conflict)->backend, comm::Backend::kLocal);
}

}  // namespace
}  // namespace herd::train
