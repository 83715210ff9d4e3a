// The launcher's variables read in one place (core/launch_env.h).
#include "herd/core/launch_env.h"

#include <unistd.h>

#include <cctype>
#include <vector>

namespace herd {
namespace {

// The fix for variables that cannot all be the launcher's.
constexpr const char* kOneLauncher =
    "unset the ones the launcher that started herd did not set (a RANK exported in a batch script, say), or "
    "start herd with one launcher: srun --mpi=pmix, mpirun or herd launch";

// Every launcher variable that holds a rank, a count or a port.
constexpr const char* kNumeric[] = {"OMPI_COMM_WORLD_RANK",
                                    "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK",
                                    "OMPI_COMM_WORLD_LOCAL_SIZE",
                                    "PMIX_RANK",
                                    "PMI_RANK",
                                    "PMI_SIZE",
                                    "MPI_LOCALRANKID",
                                    "MPI_LOCALNRANKS",
                                    "SLURM_PROCID",
                                    "SLURM_NTASKS",
                                    "SLURM_STEP_NUM_TASKS",
                                    "SLURM_LOCALID",
                                    "SLURM_NODEID",
                                    "RANK",
                                    "WORLD_SIZE",
                                    "LOCAL_RANK",
                                    "LOCAL_WORLD_SIZE",
                                    "MASTER_PORT"};

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The numeric launcher variables that are set, each checked to be a whole number.
class Numbers {
 public:
  static Result<Numbers> read(const Environment& env) {
    Numbers n;
    for (const char* name : kNumeric) {
      const auto it = env.find(name);
      if (it == env.end()) continue;
      // Nine digits at most: every value fits an int.
      if (!all_digits(it->second) || it->second.size() > 9) {
        return make_error(name, "='", it->second,
                          "' is not a whole number (a launcher sets it to a rank, a count or a port); unset it, or "
                          "start herd with the launcher that sets it");
      }
      n.v_[name] = std::stoi(it->second);
    }
    return n;
  }
  bool has(const std::string& name) const { return v_.count(name) > 0; }
  int at(const std::string& name) const { return v_.at(name); }
  std::string shown(const std::string& name) const { return name + "=" + std::to_string(v_.at(name)); }

  // `have` is set but `missing` is not, though the launcher that sets one sets both.
  Status both(const std::string& a, const std::string& b, const char* launcher) const {
    if (has(a) == has(b)) return Status::Ok();
    const std::string& have = has(a) ? a : b;
    const std::string& missing = has(a) ? b : a;
    return make_error(shown(have), " without ", missing, ": ", launcher, " sets both; set ", missing, " too, or unset ",
                      have);
  }

  // Where both are set they must hold the same `what` (a rank, a world size).
  Status agree(const std::string& other, const std::string& decided, const char* what) const {
    if (!has(other) || !has(decided) || at(other) == at(decided)) return Status::Ok();
    return make_error(shown(decided), " but ", shown(other), ": two launchers disagree on this process's ", what, "; ",
                      kOneLauncher);
  }

 private:
  std::map<std::string, int> v_;
};

const std::string* find(const Environment& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// SLURM_LOCALID and this node's count of SLURM_STEP_TASKS_PER_NODE (SLURM_TASKS_PER_NODE).
Status read_slurm_local(const Environment& env, const Numbers& n, LaunchEnv& e) {
  if (n.has("SLURM_LOCALID")) e.local_rank = n.at("SLURM_LOCALID");
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (const std::string* v = find(env, name)) {
      HERD_ASSIGN_OR_RETURN(e.local_size,
                            slurm_tasks_on_node(*v, n.has("SLURM_NODEID") ? n.at("SLURM_NODEID") : 0, name));
      return Status::Ok();
    }
  }
  return Status::Ok();
}

// The first host of the step's node list, for rank 0's address.
Status read_slurm_master(const Environment& env, LaunchEnv& e) {
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"}) {
    if (const std::string* v = find(env, name)) {
      HERD_ASSIGN_OR_RETURN(e.master_addr, first_slurm_host(*v, name));
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace

const char* launch_source_name(LaunchSource s) {
  switch (s) {
    case LaunchSource::kNone: return "no launcher";
    case LaunchSource::kMpirun: return "mpirun";
    case LaunchSource::kSrunMpi: return "srun with PMIx";
    case LaunchSource::kSlurm: return "srun without PMIx";
    case LaunchSource::kTorchrun: return "torchrun";
    case LaunchSource::kFlags: return "the launch.* settings";
  }
  return "?";
}

std::string LaunchEnv::describe() const {
  std::string s = launch_source_name(source);
  if (source == LaunchSource::kNone) return s;
  s += " (" + variables + "): rank " + std::to_string(rank) + " of " +
       (world_size > 0 ? std::to_string(world_size) : std::string("the MPI world"));
  if (local_size > 1) s += ", " + std::to_string(local_size) + " on this host";
  if (!master_addr.empty()) {
    s += ", rank 0 on " + master_addr + (master_port > 0 ? ":" + std::to_string(master_port) : std::string());
  }
  return s;
}

Environment process_environment() {
  Environment env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string kv = *p;
    const std::size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

namespace {

// The launcher's name for this start of the job, kept to characters that are safe in a file name.
std::string job_key(const Environment& env, const LaunchEnv& e) {
  auto get = [&](const char* name, const char* otherwise) {
    const std::string* v = find(env, name);
    return v != nullptr && !v->empty() ? *v : std::string(otherwise);
  };
  std::string key;
  switch (e.source) {
    case LaunchSource::kSlurm:
    case LaunchSource::kSrunMpi:
      if (find(env, "SLURM_JOB_ID") == nullptr && find(env, "SLURM_JOBID") == nullptr) return "";
      key = "slurm-" + get("SLURM_JOB_ID", get("SLURM_JOBID", "").c_str()) + "." +
            get("SLURM_STEP_ID", get("SLURM_STEPID", "0").c_str()) + "-r" + get("SLURM_RESTART_COUNT", "0");
      break;
    case LaunchSource::kTorchrun:
      key = "torchrun-" + get("TORCHELASTIC_RUN_ID", "none") + "-" + get("MASTER_ADDR", "local") + "-" +
            get("MASTER_PORT", "0") + "-r" + get("TORCHELASTIC_RESTART_COUNT", "0");
      break;
    case LaunchSource::kMpirun:
      if (find(env, "PMIX_NAMESPACE") == nullptr) return "";
      key = "mpirun-" + get("PMIX_NAMESPACE", "");
      break;
    case LaunchSource::kFlags: key = "flags-" + e.master_addr + "-" + std::to_string(e.master_port); break;
    case LaunchSource::kNone: return "";
  }
  for (char& c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  }
  return key;
}

}  // namespace

Result<LaunchEnv> read_launch_env(const Environment& env, const LaunchFlags& f) {
  if (!f.given()) return read_launch_env(env);
  LaunchEnv e;
  e.source = LaunchSource::kFlags;
  e.variables = "launch.rank=" + std::to_string(f.rank) + " launch.world_size=" + std::to_string(f.world_size);
  if (f.rank < 0 || f.world_size < 1 || f.rank >= f.world_size) {
    return make_error(e.variables, ": give launch.rank and launch.world_size together, the rank from 0 to the world ",
                      "size - 1");
  }
  if (f.local_size < 1 || f.local_rank < 0 || f.local_rank >= f.local_size) {
    return make_error("launch.local_rank=", f.local_rank, " launch.local_world_size=", f.local_size,
                      ": the local rank runs from 0 to the processes on this host - 1");
  }
  if (f.world_size > 1 && (f.master_addr.empty() || f.master_port <= 0)) {
    return make_error(e.variables, " without launch.master_addr and launch.master_port: they name the job the ",
                      "processes meet under (rank 0's host and a port); give both, the same on every process");
  }
  e.rank = f.rank;
  e.world_size = f.world_size;
  e.local_rank = f.local_rank;
  e.local_size = f.local_size;
  e.master_addr = f.master_addr;
  e.master_port = f.master_port;
  e.job_key = job_key(env, e);
  if (const std::string* iface = find(env, "GLOO_SOCKET_IFNAME")) e.socket_iface = *iface;
  return e;
}

std::string this_host() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

Result<LaunchEnv> read_launch_env(const Environment& env) {
  HERD_ASSIGN_OR_RETURN(const Numbers n, Numbers::read(env));
  const bool in_step = env.count("SLURM_STEP_ID") > 0 || env.count("SLURM_STEPID") > 0;
  std::string step_world;  // the srun step's process count
  if (n.has("SLURM_NTASKS")) {
    step_world = "SLURM_NTASKS";
  } else if (n.has("SLURM_STEP_NUM_TASKS")) {
    step_world = "SLURM_STEP_NUM_TASKS";
  }
  LaunchEnv e;
  std::string rank_var, world_var;
  std::vector<std::string> also;  // variables that agreed with the deciding ones, for `variables`
  if (n.has("OMPI_COMM_WORLD_RANK") || n.has("OMPI_COMM_WORLD_SIZE")) {
    HERD_RETURN_IF_ERROR(n.both("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun"));
    e.source = LaunchSource::kMpirun;
    rank_var = "OMPI_COMM_WORLD_RANK";
    world_var = "OMPI_COMM_WORLD_SIZE";
    HERD_RETURN_IF_ERROR(n.agree("PMIX_RANK", rank_var, "rank"));
    if (n.has("OMPI_COMM_WORLD_LOCAL_RANK")) e.local_rank = n.at("OMPI_COMM_WORLD_LOCAL_RANK");
    if (n.has("OMPI_COMM_WORLD_LOCAL_SIZE")) e.local_size = n.at("OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (n.has("PMIX_RANK") || n.has("PMI_RANK")) {
    rank_var = n.has("PMIX_RANK") ? "PMIX_RANK" : "PMI_RANK";
    HERD_RETURN_IF_ERROR(n.agree("PMI_RANK", rank_var, "rank"));
    // srun started the ranks themselves when the step's size is the MPI world's (a launcher's daemons
    // started by srun, as Hydra's proxies, make a step of their own size).
    const bool srun = in_step && !step_world.empty() && (!n.has("PMI_SIZE") || n.at("PMI_SIZE") == n.at(step_world));
    if (srun) {
      e.source = LaunchSource::kSrunMpi;
      world_var = step_world;
      HERD_RETURN_IF_ERROR(n.agree("SLURM_PROCID", rank_var, "rank"));
      if (n.has("SLURM_PROCID")) also.push_back("SLURM_PROCID");
      HERD_RETURN_IF_ERROR(read_slurm_local(env, n, e));
      HERD_RETURN_IF_ERROR(read_slurm_master(env, e));
    } else {
      e.source = LaunchSource::kMpirun;
      if (n.has("PMI_SIZE")) {
        world_var = "PMI_SIZE";
      } else if (rank_var == "PMI_RANK") {
        return n.both("PMI_RANK", "PMI_SIZE", "an MPI launcher").error();
      }
      if (n.has("MPI_LOCALRANKID")) e.local_rank = n.at("MPI_LOCALRANKID");
      if (n.has("MPI_LOCALNRANKS")) e.local_size = n.at("MPI_LOCALNRANKS");
    }
  } else if (in_step && (n.has("SLURM_PROCID") || !step_world.empty())) {
    HERD_RETURN_IF_ERROR(n.both("SLURM_PROCID", step_world.empty() ? "SLURM_NTASKS" : step_world, "srun"));
    e.source = LaunchSource::kSlurm;
    rank_var = "SLURM_PROCID";
    world_var = step_world;
    HERD_RETURN_IF_ERROR(read_slurm_local(env, n, e));
    HERD_RETURN_IF_ERROR(read_slurm_master(env, e));
  } else if (n.has("RANK") || n.has("WORLD_SIZE")) {
    HERD_RETURN_IF_ERROR(n.both("RANK", "WORLD_SIZE", "torchrun"));
    e.source = LaunchSource::kTorchrun;
    rank_var = "RANK";
    world_var = "WORLD_SIZE";
    if (n.has("LOCAL_RANK")) e.local_rank = n.at("LOCAL_RANK");
    if (n.has("LOCAL_WORLD_SIZE")) e.local_size = n.at("LOCAL_WORLD_SIZE");
  }
  // torchrun's variables beside another launcher's must describe the same process.
  if (e.source != LaunchSource::kTorchrun && e.source != LaunchSource::kNone &&
      (n.has("RANK") || n.has("WORLD_SIZE"))) {
    HERD_RETURN_IF_ERROR(n.both("RANK", "WORLD_SIZE", "torchrun"));
    HERD_RETURN_IF_ERROR(n.agree("RANK", rank_var, "rank"));
    if (!world_var.empty()) HERD_RETURN_IF_ERROR(n.agree("WORLD_SIZE", world_var, "world size"));
  }
  if (e.source == LaunchSource::kNone) return e;
  e.rank = n.at(rank_var);
  e.variables = n.shown(rank_var);
  for (const std::string& v : also) e.variables += " " + n.shown(v);
  if (world_var.empty()) {
    e.world_size = 0;  // a PMIx launcher outside Slurm: MPI_Init gives the size
  } else {
    e.world_size = n.at(world_var);
    e.variables += " " + n.shown(world_var);
    if (e.world_size == 0) {
      return make_error(n.shown(world_var), ": a job has at least one process; ", kOneLauncher);
    }
    if (e.rank >= e.world_size) {
      return make_error(n.shown(rank_var), " is not below ", n.shown(world_var), " (ranks run from 0 to ",
                        e.world_size - 1, "); ", kOneLauncher);
    }
  }
  if (e.local_size < 1 || e.local_rank >= e.local_size) {
    return make_error("this process's local rank (", e.local_rank, ") is not below the launcher's processes on ",
                      "this host (", e.local_size, "; ", e.variables, "); ", kOneLauncher);
  }
  if (const std::string* addr = find(env, "MASTER_ADDR"); addr != nullptr && !addr->empty()) e.master_addr = *addr;
  if (n.has("MASTER_PORT")) e.master_port = n.at("MASTER_PORT");
  e.job_key = job_key(env, e);
  if (const std::string* iface = find(env, "GLOO_SOCKET_IFNAME")) e.socket_iface = *iface;
  return e;
}

Result<std::string> first_slurm_host(const std::string& nodelist, const std::string& variable) {
  auto bad = [&] {
    return make_error(variable, "='", nodelist,
                      "' is not a Slurm node list (e.g. node[03-05,7],gpu1); unset it, or start herd with srun");
  };
  std::string host;
  std::size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] == ']') return bad();
    if (nodelist[i] != '[') {
      host += nodelist[i++];
      continue;
    }
    // A bracket: its first range's first number, zero padding kept.
    const std::size_t close = nodelist.find(']', i);
    if (close == std::string::npos) return bad();
    const std::string inside = nodelist.substr(i + 1, close - i - 1);
    const std::string first = inside.substr(0, inside.find_first_of(",-"));
    if (!all_digits(first)) return bad();
    host += first;
    i = close + 1;
  }
  if (host.empty()) return bad();
  return host;
}

Result<int> slurm_tasks_on_node(const std::string& tasks_per_node, int node, const std::string& variable) {
  auto bad = [&] {
    return make_error(variable, "='", tasks_per_node, "' is not a Slurm tasks-per-node list (e.g. 2(x3),1) with node ",
                      node, " in it; unset it, or start herd with srun");
  };
  long long first_node = 0;
  std::size_t i = 0;
  while (i < tasks_per_node.size()) {
    std::size_t end = tasks_per_node.find(',', i);
    if (end == std::string::npos) end = tasks_per_node.size();
    const std::string item = tasks_per_node.substr(i, end - i);
    const std::size_t paren = item.find("(x");
    const std::string count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      if (item.back() != ')') return bad();
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(repeat) || count.size() > 9 || repeat.size() > 9) return bad();
    first_node += std::stoll(repeat);
    if (node < first_node) return std::stoi(count);
    i = end + 1;
  }
  return bad();
}

}  // namespace herd
