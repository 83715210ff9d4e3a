// Each launcher's variables as it sets them (the srun ones copied from a Slurm 22.05 step with and
// without --mpi=pmix, the mpirun ones from Open MPI 4.1 inside an sbatch allocation), and the
// conflicting, partial and malformed sets a user's script can leave.
#include "herd/core/launch_env.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

std::string error_of(const Environment& env) {
  const Result<LaunchEnv> r = read_launch_env(env);
  return r.ok() ? std::string("(no error)") : r.error().message();
}

TEST(LaunchEnv, NoLauncherIsOneProcess) {
  const LaunchEnv e = *read_launch_env({{"HOME", "/root"}});
  EXPECT_EQ(e.source, LaunchSource::kNone);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_size, 1);
  EXPECT_FALSE(e.mpi());
  EXPECT_EQ(e.describe(), "no launcher");
}

TEST(LaunchEnv, Mpirun) {
  const LaunchEnv e = *read_launch_env({{"OMPI_COMM_WORLD_RANK", "3"},
                                        {"OMPI_COMM_WORLD_SIZE", "4"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                        {"PMIX_RANK", "3"}});
  EXPECT_EQ(e.source, LaunchSource::kMpirun);
  EXPECT_TRUE(e.mpi());
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_EQ(e.describe(), "mpirun (OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4): rank 3 of 4, 2 on this host");
}

// mpirun inside an sbatch allocation: every rank inherits the batch script's SLURM_PROCID=0, which
// describes where mpirun runs, not the rank.
TEST(LaunchEnv, MpirunInsideSlurmIgnoresTheBatchScriptsVariables) {
  const LaunchEnv e = *read_launch_env({{"OMPI_COMM_WORLD_RANK", "1"},
                                        {"OMPI_COMM_WORLD_SIZE", "2"},
                                        {"PMIX_RANK", "1"},
                                        {"SLURM_JOB_ID", "2"},
                                        {"SLURM_PROCID", "0"},
                                        {"SLURM_LOCALID", "0"},
                                        {"SLURM_NTASKS", "4"},
                                        {"SLURM_TASKS_PER_NODE", "4"}});
  EXPECT_EQ(e.source, LaunchSource::kMpirun);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
}

TEST(LaunchEnv, HydraMpiexec) {
  const LaunchEnv e =
      *read_launch_env({{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"}});
  EXPECT_EQ(e.source, LaunchSource::kMpirun);
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 6);
  EXPECT_EQ(e.local_size, 3);
}

// srun --mpi=pmix -n 4 on two nodes of two tasks each, task 3.
Environment srun_pmix_task3() {
  return {{"PMIX_RANK", "3"},
          {"SLURM_JOB_ID", "1"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", "3"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_MPI_TYPE", "pmix"},
          {"SLURM_JOB_NODELIST", "node[03-04]"},
          {"SLURM_STEP_NODELIST", "node[03-04]"}};
}

TEST(LaunchEnv, SrunWithPmix) {
  const LaunchEnv e = *read_launch_env(srun_pmix_task3());
  EXPECT_EQ(e.source, LaunchSource::kSrunMpi);
  EXPECT_TRUE(e.mpi());
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_EQ(e.master_addr, "node03");
  EXPECT_EQ(
      e.describe(),
      "srun with PMIx (PMIX_RANK=3 SLURM_PROCID=3 SLURM_NTASKS=4): rank 3 of 4, 2 on this host, rank 0 on node03");
}

TEST(LaunchEnv, SlurmWithoutPmix) {
  Environment env = srun_pmix_task3();
  env.erase("PMIX_RANK");
  env.erase("SLURM_MPI_TYPE");
  env.erase("SLURM_STEP_NODELIST");
  env["SLURM_NODELIST"] = "gpu[7-8,10]";
  const LaunchEnv e = *read_launch_env(env);
  EXPECT_EQ(e.source, LaunchSource::kSlurm);
  EXPECT_FALSE(e.mpi());
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_EQ(e.master_addr, "gpu7");
  EXPECT_EQ(e.variables, "SLURM_PROCID=3 SLURM_NTASKS=4");
}

// The batch script is one process: its allocation's SLURM_NTASKS is not a world of this process.
TEST(LaunchEnv, TheBatchScriptIsOneProcess) {
  const LaunchEnv e = *read_launch_env(
      {{"SLURM_JOB_ID", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_TASKS_PER_NODE", "4"}});
  EXPECT_EQ(e.source, LaunchSource::kNone);
  EXPECT_EQ(e.world_size, 1);
}

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv e = *read_launch_env({{"RANK", "5"},
                                        {"WORLD_SIZE", "8"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "4"},
                                        {"MASTER_ADDR", "10.0.0.7"},
                                        {"MASTER_PORT", "29500"}});
  EXPECT_EQ(e.source, LaunchSource::kTorchrun);
  EXPECT_FALSE(e.mpi());
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 4);
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.describe(), "torchrun (RANK=5 WORLD_SIZE=8): rank 5 of 8, 4 on this host, rank 0 on 10.0.0.7:29500");
  // torchrun's static rendezvous names no run: the job key is its address, port and restart count.
  EXPECT_EQ(e.job_key, "torchrun-none-10.0.0.7-29500-r0");
  EXPECT_EQ(e.socket_iface, "");
}

// Each start of a job has its own key, the same on every process: torchrun's run id and restart count,
// Slurm's job, step and requeue count; the network interface for gloo comes from GLOO_SOCKET_IFNAME.
TEST(LaunchEnv, JobKeysAndTheSocketInterface) {
  const LaunchEnv t = *read_launch_env({{"RANK", "1"},
                                        {"WORLD_SIZE", "2"},
                                        {"MASTER_ADDR", "h/1"},
                                        {"MASTER_PORT", "29500"},
                                        {"TORCHELASTIC_RUN_ID", "a b"},
                                        {"TORCHELASTIC_RESTART_COUNT", "2"},
                                        {"GLOO_SOCKET_IFNAME", "ib0"}});
  EXPECT_EQ(t.job_key, "torchrun-a_b-h_1-29500-r2");
  EXPECT_EQ(t.socket_iface, "ib0");
  Environment slurm = srun_pmix_task3();
  slurm.erase("PMIX_RANK");
  slurm["SLURM_JOB_ID"] = "4411";
  slurm["SLURM_RESTART_COUNT"] = "1";
  EXPECT_EQ(read_launch_env(slurm)->job_key, "slurm-4411." + slurm["SLURM_STEP_ID"] + "-r1");
  slurm.erase("SLURM_JOB_ID");
  EXPECT_EQ(read_launch_env(slurm)->job_key, "");
  EXPECT_EQ(read_launch_env({})->job_key, "");
}

// A PMIx launcher outside Slurm that exports no size: MPI_Init gives it.
TEST(LaunchEnv, APmixRankAloneLeavesTheSizeToMpi) {
  const LaunchEnv e = *read_launch_env({{"PMIX_RANK", "1"}});
  EXPECT_EQ(e.source, LaunchSource::kMpirun);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 0);
}

TEST(LaunchEnv, ConflictingVariablesNameBothAndTheFix) {
  Environment env = srun_pmix_task3();
  env["SLURM_PROCID"] = "2";
  EXPECT_EQ(error_of(env),
            "PMIX_RANK=3 but SLURM_PROCID=2: two launchers disagree on this process's rank; unset the ones the "
            "launcher that started herd did not set (a RANK exported in a batch script, say), or start herd with "
            "one launcher: srun --mpi=pmix, mpirun or herd launch");
  env = srun_pmix_task3();
  env["RANK"] = "0";  // exported once in the batch script, so every task has it
  env["WORLD_SIZE"] = "4";
  EXPECT_NE(error_of(env).find("PMIX_RANK=3 but RANK=0: two launchers disagree on this process's rank;"),
            std::string::npos);
  env["RANK"] = "3";
  env["WORLD_SIZE"] = "8";
  EXPECT_NE(error_of(env).find("SLURM_NTASKS=4 but WORLD_SIZE=8: two launchers disagree on this process's world size"),
            std::string::npos);
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMIX_RANK", "0"}})
                .find("OMPI_COMM_WORLD_RANK=1 but PMIX_RANK=0"),
            std::string::npos);
}

TEST(LaunchEnv, ARankNotBelowItsWorldIsRefused) {
  EXPECT_EQ(error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}),
            "RANK=4 is not below WORLD_SIZE=4 (ranks run from 0 to 3); unset the ones the launcher that started "
            "herd did not set (a RANK exported in a batch script, say), or start herd with one launcher: srun "
            "--mpi=pmix, mpirun or herd launch");
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=0: a job has at least one process"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}})
                .find("local rank (2) is not below the launcher's processes on this host (2; RANK=1 WORLD_SIZE=4)"),
            std::string::npos);
}

TEST(LaunchEnv, PartialSetsNameWhatIsMissing) {
  EXPECT_EQ(error_of({{"RANK", "1"}}),
            "RANK=1 without WORLD_SIZE: torchrun sets both; set WORLD_SIZE too, or unset RANK");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}}),
            "WORLD_SIZE=2 without RANK: torchrun sets both; set RANK too, or unset WORLD_SIZE");
  EXPECT_EQ(error_of({{"OMPI_COMM_WORLD_RANK", "0"}}),
            "OMPI_COMM_WORLD_RANK=0 without OMPI_COMM_WORLD_SIZE: mpirun sets both; set OMPI_COMM_WORLD_SIZE too, or "
            "unset OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(error_of({{"PMI_RANK", "0"}}),
            "PMI_RANK=0 without PMI_SIZE: an MPI launcher sets both; set PMI_SIZE too, or unset PMI_RANK");
  EXPECT_EQ(error_of({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}}),
            "SLURM_PROCID=1 without SLURM_NTASKS: srun sets both; set SLURM_NTASKS too, or unset SLURM_PROCID");
}

TEST(LaunchEnv, MalformedValuesAreNamed) {
  EXPECT_EQ(error_of({{"SLURM_NTASKS", "four"}}),
            "SLURM_NTASKS='four' is not a whole number (a launcher sets it to a rank, a count or a port); unset it, "
            "or start herd with the launcher that sets it");
  EXPECT_NE(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}).find("RANK='-1' is not a whole number"), std::string::npos);
  Environment env = srun_pmix_task3();
  env["SLURM_STEP_NODELIST"] = "node[03-04";
  EXPECT_EQ(error_of(env),
            "SLURM_STEP_NODELIST='node[03-04' is not a Slurm node list (e.g. node[03-05,7],gpu1); unset it, or start "
            "herd with srun");
  env = srun_pmix_task3();
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x1)";  // no count for node 1
  EXPECT_NE(error_of(env).find("SLURM_STEP_TASKS_PER_NODE='2(x1)' is not a Slurm tasks-per-node list"),
            std::string::npos);
}

TEST(LaunchEnv, SlurmNodeLists) {
  EXPECT_EQ(*first_slurm_host("node[03-05,7]", "L"), "node03");
  EXPECT_EQ(*first_slurm_host("node[7,03-05]", "L"), "node7");
  EXPECT_EQ(*first_slurm_host("vm", "L"), "vm");
  EXPECT_EQ(*first_slurm_host("a1,b[1-2]", "L"), "a1");
  EXPECT_EQ(*first_slurm_host("rack[1-2]-n[01-04]", "L"), "rack1-n01");
  for (const char* bad : {"", "node[", "node[]", "node]", "[a-b]x", ",a"}) {
    EXPECT_FALSE(first_slurm_host(bad, "L").ok()) << bad;
  }
}

TEST(LaunchEnv, SlurmTasksPerNode) {
  EXPECT_EQ(*slurm_tasks_on_node("4", 0, "T"), 4);
  EXPECT_EQ(*slurm_tasks_on_node("2(x3),1", 2, "T"), 2);
  EXPECT_EQ(*slurm_tasks_on_node("2(x3),1", 3, "T"), 1);
  EXPECT_FALSE(slurm_tasks_on_node("2(x3),1", 4, "T").ok());
  EXPECT_FALSE(slurm_tasks_on_node("2(x", 0, "T").ok());
  EXPECT_FALSE(slurm_tasks_on_node("", 0, "T").ok());
}

}  // namespace
}  // namespace herd
