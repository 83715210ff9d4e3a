// The backend from how the process was started (train::resolve_launch): MPI under mpirun and srun with
// PMIx, gloo under torchrun and srun without PMIx, ranks as threads without a launcher, and one line
// naming the launcher and what to run instead where a backend does not fit it.
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
const Environment kSlurm = {
    {"SLURM_JOB_ID", "812"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}};
const Environment kTorchrun = {{"RANK", "0"},
                               {"WORLD_SIZE", "2"},
                               {"LOCAL_RANK", "0"},
                               {"MASTER_ADDR", "node3"},
                               {"MASTER_PORT", "29500"},
                               {"TORCHELASTIC_RUN_ID", "r7"},
                               {"TORCHELASTIC_RESTART_COUNT", "1"}};

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

TEST(ResolveLaunch, SeveralProcessesWithoutMpiRunTheGlooBackend) {
  for (const Environment& env : {kSlurm, kTorchrun}) {
    for (const char* backend : {"auto", "gloo"}) {
      const Result<JobLaunch> j = resolve_launch(with_backend(backend), env);
      if (!comm::gloo_compiled_in()) {
        EXPECT_NE(j.error().message().find("herd was built without it; install libgloo-dev"), std::string::npos);
        continue;
      }
      ASSERT_TRUE(j.ok()) << j.error().message();
      EXPECT_EQ(j->backend, comm::Backend::kGloo) << backend;
    }
  }
  if (!comm::gloo_compiled_in()) return;
  const JobLaunch torchrun = *resolve_launch(with_backend("auto"), kTorchrun);
  EXPECT_EQ(torchrun.env.job_key, "torchrun-r7-node3-29500-r1");
  EXPECT_TRUE(torchrun.lead());
  const JobLaunch srun = *resolve_launch(with_backend("auto"), kSlurm);
  EXPECT_EQ(srun.env.job_key, "slurm-812.0-r0");
  // Under an MPI launcher gloo is asked for by name, and meets under the MPI job's namespace.
  Environment mpirun = kMpirun;
  mpirun["PMIX_NAMESPACE"] = "prterun-vm-1234@1";
  mpirun["PMIX_RANK"] = "1";
  EXPECT_EQ(resolve_launch(with_backend("gloo"), mpirun)->env.job_key, "mpirun-prterun-vm-1234_1");
  EXPECT_FALSE(resolve_launch(with_backend("gloo"), mpirun)->lead());
}

TEST(ResolveLaunch, GlooNeedsALauncherThatNamesTheJob) {
  if (!comm::gloo_compiled_in()) GTEST_SKIP() << "built without gloo";
  EXPECT_EQ(error_of("gloo", {}),
            "parallel.backend=gloo runs one rank per process, but no launcher started this one (no RANK/WORLD_SIZE, "
            "SLURM_PROCID or MPI variables); start it with torchrun --no-python or srun, or use "
            "parallel.backend=local");
  EXPECT_EQ(error_of("gloo", kMpirun),
            "parallel.backend=gloo: mpirun (OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4) gives no job id for the "
            "ranks to meet under (SLURM_JOB_ID, PMIX_NAMESPACE); start herd with torchrun or srun, or use "
            "parallel.backend=mpi");
}

// The launch.* settings override every launcher's variables: processes started by hand run over gloo
// and meet under the master address and port they are given.
TEST(ResolveLaunch, LaunchSettingsOverrideTheLaunchersVariables) {
  TrainConfig cfg;
  cfg.launch.rank = 1;
  cfg.launch.world_size = 2;
  cfg.launch.master_addr = "node7";
  cfg.launch.master_port = 29600;
  const Result<JobLaunch> j = resolve_launch(cfg, kTorchrun);
  if (!comm::gloo_compiled_in()) {
    EXPECT_FALSE(j.ok());
    return;
  }
  ASSERT_TRUE(j.ok()) << j.error().message();
  EXPECT_EQ(j->backend, comm::Backend::kGloo);
  EXPECT_EQ(j->env.source, LaunchSource::kFlags);
  EXPECT_EQ(j->env.rank, 1);
  EXPECT_EQ(j->env.job_key, "flags-node7-29600");
  EXPECT_FALSE(j->lead());
  cfg.launch.master_port = 0;
  EXPECT_EQ(resolve_launch(cfg, {}).error().message(),
            "launch.rank=1 launch.world_size=2 without launch.master_addr and launch.master_port: they name the job "
            "the processes meet under (rank 0's host and a port); give both, the same on every process");
  cfg.launch.rank = 2;
  EXPECT_EQ(resolve_launch(cfg, {}).error().message(),
            "launch.rank=2 launch.world_size=2: give launch.rank and launch.world_size together, the rank from 0 to "
            "the world size - 1");
  // One process by its own word is a job of one rank: ranks as threads.
  cfg = TrainConfig{};
  cfg.launch.rank = 0;
  cfg.launch.world_size = 1;
  EXPECT_EQ(resolve_launch(cfg, kTorchrun)->backend, comm::Backend::kLocal);
}

TEST(ResolveLaunch, TheRendezvousDirectoryIsSharedStorageWhereKnown) {
  TrainConfig cfg;
  cfg.checkpoint.dir = "/shared/run1/ckpt";
  EXPECT_EQ(rendezvous_dir(cfg), "/shared/run1/ckpt/rendezvous");
  cfg.parallel.rendezvous_dir = "/shared/meet";
  EXPECT_EQ(rendezvous_dir(cfg), "/shared/meet");
  cfg = TrainConfig{};
  EXPECT_NE(rendezvous_dir(cfg).find("herd-rendezvous"), std::string::npos);
}

TEST(ResolveLaunch, BackendsThatDoNotFitTheLauncherAreRefused) {
  for (const Environment& env : {Environment{}, kSlurm, kTorchrun}) {
    EXPECT_EQ(error_of("mpi", env),
              "parallel.backend=mpi but this process was not started by mpirun or srun --mpi=pmix; run it as `mpirun "
              "-np N herd train ...`, or use parallel.backend=auto (gloo under torchrun or srun without PMIx, ranks "
              "as threads without a launcher)");
  }
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
