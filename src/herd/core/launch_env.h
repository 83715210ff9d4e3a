// Where this process stands in a job of several processes, as the launcher that started it says:
// mpirun (Open MPI, MPICH's Hydra), srun with PMIx (or PMI-2), srun without an MPI plugin, torchrun.
// The one reader of launcher variables: the backend choice, rank 0's duties, the world size a layout
// is checked against and the processes sharing this host (the OpenMP spin budget) all come from here.
//
// Which variables decide, first match:
//  1. mpirun: Open MPI's OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE, else Hydra's PMI_RANK and
//     PMI_SIZE (MPI_LOCALRANKID/MPI_LOCALNRANKS) outside an srun step. PMIX_RANK, which Open MPI also
//     sets, must agree. The Slurm variables under mpirun describe where mpirun itself runs (the batch
//     script's SLURM_PROCID=0 on every rank, or mpirun's daemons), not the ranks, and are not read.
//  2. srun with an MPI plugin (srun --mpi=pmix; PMI-2): PMIX_RANK (or PMI_RANK) inside an srun step
//     (SLURM_STEP_ID). The step is the MPI world: SLURM_PROCID must equal the rank, SLURM_NTASKS (or
//     SLURM_STEP_NUM_TASKS) is the world size, SLURM_LOCALID and SLURM_STEP_TASKS_PER_NODE the host's.
//  3. srun without one: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID inside an srun step. The batch script
//     itself (no SLURM_STEP_ID) is one process, whatever its allocation's SLURM_NTASKS.
//  4. torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE.
// The host of rank 0: MASTER_ADDR and MASTER_PORT where set, else the first host of the srun step's
// node list (SLURM_STEP_NODELIST, SLURM_NODELIST, SLURM_JOB_NODELIST; `node[03-05,7]` is node03).
// The job key (below) and GLOO_SOCKET_IFNAME are read here too.
//
// A malformed number, a partial set (RANK without WORLD_SIZE), a rank not below its world, or two
// launchers' variables disagreeing on this process (an exported RANK beside srun's SLURM_PROCID) is
// one error naming the variables, their values and the fix.
#pragma once

#include <map>
#include <string>

#include "herd/core/error.h"

namespace herd {

enum class LaunchSource { kNone, kMpirun, kSrunMpi, kSlurm, kTorchrun, kFlags };

// "no launcher", "mpirun", "srun with PMIx", "srun without PMIx", "torchrun", "the launch.* settings".
const char* launch_source_name(LaunchSource s);

struct LaunchEnv {
  LaunchSource source = LaunchSource::kNone;
  int rank = 0;
  // 0 only under an MPI launcher that exports no size (a PMIx launcher outside Slurm): MPI_Init gives it.
  int world_size = 1;
  int local_rank = 0;       // among this host's processes of the job
  int local_size = 1;       // this host's processes of the job; 1 where the launcher does not say
  std::string master_addr;  // the host of rank 0, where known
  int master_port = 0;      // MASTER_PORT; 0 when not given
  std::string variables;    // the variables that decided, "PMIX_RANK=1 SLURM_PROCID=1 SLURM_NTASKS=4"
  // What this start of the job is called, the same on every process and different on the next start:
  // "slurm-<SLURM_JOB_ID>.<step>-r<SLURM_RESTART_COUNT>", "torchrun-<TORCHELASTIC_RUN_ID>-<MASTER_ADDR>-
  // <MASTER_PORT>-r<TORCHELASTIC_RESTART_COUNT>", "mpirun-<PMIX_NAMESPACE>"; empty where the launcher
  // gives none. The gloo backend's ranks meet under it.
  std::string job_key;
  std::string socket_iface;  // GLOO_SOCKET_IFNAME: the network interface gloo listens on; empty: the host's

  // Started by an MPI launcher: herd's MPI backend can run the job.
  bool mpi() const { return source == LaunchSource::kMpirun || source == LaunchSource::kSrunMpi; }
  // "srun with PMIx (PMIX_RANK=1 SLURM_PROCID=1 SLURM_NTASKS=4): rank 1 of 4, 4 on this host, rank 0 on node03".
  std::string describe() const;
};

using Environment = std::map<std::string, std::string>;

// This process's environment (environ).
Environment process_environment();

// Where the user says this process stands (`herd train --launch.rank=R --launch.world_size=N ...`):
// processes started by hand or by a launcher herd does not read. Given, it overrides every launcher's
// variables; the processes talk over gloo and meet under "flags-<master_addr>-<master_port>", which
// every process of one start must be given alike.
struct LaunchFlags {
  int rank = -1;  // -1: not given
  int world_size = 0;
  int local_rank = 0;
  int local_size = 1;
  std::string master_addr;
  int master_port = 0;
  bool given() const { return rank >= 0 || world_size > 0; }
};

// `flags` where given, else the launcher that set `env`.
Result<LaunchEnv> read_launch_env(const Environment& env, const LaunchFlags& flags);

// This host's name (gethostname); "unknown" when it fails.
std::string this_host();

// Where the launcher that set `env` put this process.
Result<LaunchEnv> read_launch_env(const Environment& env);

// The first host of a Slurm node list: "node[03-05,7],gpu1" is node03, "rack[1-2]-n[01-04]" rack1-n01.
// `variable` names the list in the error of a malformed one.
Result<std::string> first_slurm_host(const std::string& nodelist, const std::string& variable);

// This host's count in a Slurm tasks-per-node list ("4", "2(x3),1") for the node of index `node`.
Result<int> slurm_tasks_on_node(const std::string& tasks_per_node, int node, const std::string& variable);

}  // namespace herd
