// The start-up path (job.h): the layout checked once, the backend, and the ranks, as threads of this
// process or as this mpirun-started process, each running the Trainer on its parallel::RankModel.
#include "herd/train/job/job.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "herd/comm/local/local_world.h"
#if HERD_HAVE_NCCL
#include "herd/comm/nccl/nccl_communicator.h"
#endif
#include "herd/core/cores.h"
#include "herd/core/log.h"
#include "herd/kernels/device.h"
#include "herd/kernels/gemm.h"
#include "herd/measure/comm_timer.h"
#include "herd/model/shard.h"
#include "herd/parallel/device_memory.h"
#include "herd/parallel/pp/plan.h"
#include "herd/train/job/fault_injector.h"
#include "herd/train/job/watchdog.h"
#include "herd/train/step/out_of_memory.h"

namespace herd::train {

parallel::RankModelOptions JobLayout::model_options(std::int64_t seq_len) const {
  parallel::RankModelOptions o;
  o.recompute = resolved.layout.recompute;
  o.micro_batch = resolved.layout.microbatch;
  o.seq_len = seq_len;
  o.schedule = schedule;
  return o;
}

namespace {

// The model's shard rules at these degrees, and dp dividing the batch.
Status check_shards(const model::LlamaConfig& m, const topology::ParallelDims& dims, std::int64_t global_batch,
                    std::int64_t seq_len, bool sequence_parallel) {
  HERD_RETURN_IF_ERROR(model::check_shardable(
      m,
      model::ShardSpec{.tp = dims.tp(), .cp = dims.cp(), .seq_len = seq_len, .sequence_parallel = sequence_parallel}));
  return model::check_dp_divides_batch(global_batch, dims.dp());
}

}  // namespace

Result<JobLayout> check_layout(const TrainConfig& cfg, const model::LlamaConfig& m, std::int64_t world_size) {
  HERD_RETURN_IF_ERROR(validate(cfg));
  const ParallelSection& p = cfg.parallel;
  JobLayout j;
  HERD_ASSIGN_OR_RETURN(j.dims, topology::ParallelDims::make(p.tp, p.cp, p.pp, p.dp, world_size));
  HERD_ASSIGN_OR_RETURN(j.resolved, resolve_layout(cfg));
  const planner::Layout& l = j.resolved.layout;
  const bool sp = p.sequence_parallel && p.tp > 1;
  HERD_RETURN_IF_ERROR(check_shards(m, j.dims, cfg.train.global_batch, cfg.data.seq_len, sp));
  j.schedule.pp = static_cast<int>(l.pp);
  j.schedule.v = l.v;
  j.schedule.microbatches = static_cast<int>(j.resolved.microbatches);
  j.schedule.n = l.n;
  j.schedule.kind = l.schedule;
  if (l.pp == 1) {
    if (l.v != 1) return make_error("parallel.v (", l.v, ") needs parallel.pp > 1; set v = 1");
  } else if (Result<parallel::pp::PipelinePlan> plan = parallel::pp::plan_pipeline(m, j.schedule); !plan.ok()) {
    const schedule::ScheduleSpec& s = j.schedule;
    return plan.error().with_context("pipeline pp=" + std::to_string(s.pp) + " v=" + std::to_string(s.v) +
                                     " M=" + std::to_string(s.microbatches) + " n=" + std::to_string(s.n));
  }
  if (cfg.schedule.ramp) {
    // The ramp's first stages run half the micro-batch (every rank keeps its M), the first at half length.
    if (l.microbatch % 2 != 0) {
      return make_error(
          "schedule.ramp halves the micro-batch of every data-parallel rank, but "
          "parallel.microbatch_size is ",
          l.microbatch, "; use an even micro-batch size or schedule.ramp=false");
    }
    Status half = check_shards(m, j.dims, cfg.train.global_batch / 2, cfg.data.seq_len / 2, sp);
    if (!half.ok()) return half.error().with_context("schedule.ramp's first stage (half the sequence length)");
  }
  return j;
}

comm::CommOptions comm_options(const TrainConfig& cfg) {
  comm::CommOptions o;
  o.timeout_s = cfg.parallel.comm_timeout_s;
  o.deterministic = cfg.comm.deterministic;
  o.dump_dir = diagnostics_dir(cfg);
  o.job_id = cfg.diagnostics.job_id;
  o.recorder_capacity = static_cast<std::size_t>(cfg.comm.recorder_size);
  // A GPU run hands its communicators device buffers: the local backend then moves and sums them on
  // the device (ranks as threads sharing it), NCCL orders its stream after the rank's queue.
  const Result<kernels::Device> device = train_device(cfg);
  if (device.ok() && *device != kernels::Device::kCpu) {
    o.device_memory = parallel::make_device_memory(kernels::ops_for(*device));
  }
  return o;
}

std::string diagnostics_dir(const TrainConfig& cfg) {
  namespace fs = std::filesystem;
  if (!cfg.diagnostics.dir.empty()) return cfg.diagnostics.dir;
  if (!cfg.checkpoint.dir.empty()) return (fs::path(cfg.checkpoint.dir) / "diagnostics").string();
  if (!cfg.train.metrics_file.empty()) {
    const fs::path parent = fs::path(cfg.train.metrics_file).parent_path();
    return parent.empty() ? std::string(".") : parent.string();
  }
  std::error_code ec;
  return fs::temp_directory_path(ec).string();
}

std::string make_job_id() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d-%02d%02d%02d-%ld", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long>(getpid()));
  return buf;
}

namespace {

// A launcher of several processes that are not MPI's, in a build without gloo: what to run instead.
Error no_gloo(const LaunchEnv& e) {
  const std::string n = std::to_string(e.world_size);
  return make_error(launch_source_name(e.source), " started ", n, " processes (", e.variables,
                    "), which talk over gloo, but herd was built without it; install libgloo-dev and rebuild ",
                    "(scripts/setup.sh), or run mpirun -np ", n, " herd train ..., herd launch -np ", n,
                    " -- herd train ..., or under Slurm srun --mpi=pmix herd train ...");
}

// The gloo backend's needs: a launcher that numbers the processes and names this start of the job.
Status check_gloo(const LaunchEnv& e) {
  if (!comm::gloo_compiled_in()) return no_gloo(e);
  if (e.source == LaunchSource::kNone) {
    return make_error("parallel.backend=gloo runs one rank per process, but no launcher started this one (no ",
                      "RANK/WORLD_SIZE, SLURM_PROCID or MPI variables); start it with torchrun --no-python or srun, ",
                      "or use parallel.backend=local");
  }
  if (e.job_key.empty()) {
    return make_error("parallel.backend=gloo: ", launch_source_name(e.source), " (", e.variables,
                      ") gives no job id for the ranks to meet under (SLURM_JOB_ID, PMIX_NAMESPACE); start herd ",
                      "with torchrun or srun, or use parallel.backend=mpi");
  }
  return Status::Ok();
}

}  // namespace

Result<JobLaunch> resolve_launch(const TrainConfig& cfg, const Environment& env) {
  JobLaunch j;
  const LaunchFlags flags{static_cast<int>(cfg.launch.rank),
                          static_cast<int>(cfg.launch.world_size),
                          static_cast<int>(cfg.launch.local_rank),
                          static_cast<int>(cfg.launch.local_world_size),
                          cfg.launch.master_addr,
                          static_cast<int>(cfg.launch.master_port)};
  Result<LaunchEnv> found = read_launch_env(env, flags);
  if (cfg.parallel.backend == "local") {
    if (found.ok() && found->world_size > 1) {
      return make_error("parallel.backend=local runs every rank as a thread of this process, but ",
                        launch_source_name(found->source), " started ", found->world_size, " processes (",
                        found->variables, "), each of which would run the whole job; start one process, or set ",
                        "parallel.backend=auto");
    }
    return j;
  }
  HERD_ASSIGN_OR_RETURN(j.env, std::move(found));
  if (cfg.parallel.backend == "gloo") {
    HERD_RETURN_IF_ERROR(check_gloo(j.env));
    j.backend = comm::Backend::kGloo;
    return j;
  }
  if (cfg.parallel.backend != "auto") HERD_RETURN_IF_ERROR(comm::parse_backend(cfg.parallel.backend));
  if (j.env.mpi()) {
    j.backend = comm::Backend::kMpi;
    return j;
  }
  if (cfg.parallel.backend == "mpi") {
    return make_error("parallel.backend=mpi but this process was not started by mpirun or srun --mpi=pmix; run it as ",
                      "`mpirun -np N herd train ...`, or use parallel.backend=auto (gloo under torchrun or srun ",
                      "without PMIx, ranks as threads without a launcher)");
  }
  if (j.env.world_size > 1) {
    HERD_RETURN_IF_ERROR(check_gloo(j.env));
    j.backend = comm::Backend::kGloo;
  }
  return j;
}

std::string rendezvous_dir(const TrainConfig& cfg) {
  if (!cfg.parallel.rendezvous_dir.empty()) return cfg.parallel.rendezvous_dir;
  namespace fs = std::filesystem;
  if (!cfg.checkpoint.dir.empty()) return (fs::path(cfg.checkpoint.dir) / "rendezvous").string();
  std::error_code ec;
  return (fs::temp_directory_path(ec) / "herd-rendezvous").string();
}

Result<JobInputs> load_job_inputs(const TrainConfig& cfg) {
  JobInputs in;
  HERD_ASSIGN_OR_RETURN(data::TokenDocuments train, data::read_split(cfg.data.dir, "train"));
  HERD_ASSIGN_OR_RETURN(in.model, resolve_model_config(cfg, train.vocab_size));
  in.data.train = std::make_shared<const data::TokenDocuments>(std::move(train));
  Result<data::TokenDocuments> val = data::read_split(cfg.data.dir, "val");
  if (val.ok() && val->n_tokens() > 0) {
    in.data.val = std::make_shared<const data::TokenDocuments>(std::move(*val));
  } else if (cfg.eval.every > 0) {
    log_warning("data.dir ", cfg.data.dir,
                " has no held-out split; no evaluation (run herd data with --val-fraction > 0)");
  }
  return in;
}

int blas_threads_per_rank(int ranks) {
  const int cores = usable_cores();
  return std::max(1, cores / std::max(1, ranks));
}

namespace {

template <typename T>
Status run_rank_unguarded(comm::Communicator& world_in, const TrainConfig& cfg, const JobLayout& layout,
                          const model::LlamaConfig& m, const JobData& data, JobResult<T>* out, std::int64_t stop_after,
                          bool gather) {
  // Every group is split from the timed world, so the time spent waiting on any collective is counted.
  measure::TimedCommunicator world(world_in);
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<parallel::ParallelGroups> groups,
                        parallel::ParallelGroups::make(world, layout.dims));
  parallel::ParallelContext ctx = groups->context(cfg.parallel.sequence_parallel, cfg.parallel.reshard_after_forward);
  ctx.precision = cfg.train.precision;
  HERD_ASSIGN_OR_RETURN(ctx.device, train_device(cfg));  // the op interface every module of the rank runs on
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<parallel::RankModel<T>> model,
                        parallel::RankModel<T>::make(ctx, m, layout.model_options(cfg.data.seq_len)));
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<Trainer<T>> trainer,
                        Trainer<T>::make(cfg, layout.resolved, m, ctx, std::move(model), data.train, data.val));
  trainer->quiet = out != nullptr && (world.rank() != 0 || out->quiet);
  trainer->step_clock = out != nullptr && out->step_clock ? out->step_clock(world.rank())
                                                          : measured_step_clock([&world] { return world.totals(); });
  trainer->heartbeat = [beat = world_in.recorder_ptr()](const std::string& what) { beat->beat(what); };
  trainer->recorder = world_in.recorder_ptr();
  trainer->comm_by_kind = [&world] { return world.totals().wall_by_kind; };
  trainer->hooks =
      make_fault_injector<T>(cfg, ctx, trainer->resumed_from(), [t = trainer.get()] { t->wait_for_saves(); });
  HERD_RETURN_IF_ERROR(trainer->run(stop_after));
  std::vector<std::pair<std::string, std::vector<T>>> weights;
  if (gather) {
    HERD_ASSIGN_OR_RETURN(weights, trainer->model().gather_full_weights());
  }
  if (world.rank() == 0 && out != nullptr) {
    out->history = trainer->history();
    out->weights = std::move(weights);
    out->step_seconds = trainer->step_seconds_total;
    out->comm_seconds = world.wait_seconds();
    out->resumed_from = trainer->resumed_from();
  }
  // Every rank agreed on the stop; with MPI each process reports it for its own exit code.
  if (out != nullptr && (world.rank() == 0 || std::string(world.backend()) == "mpi")) {
    out->preempted = trainer->preempted();
  }
  return Status::Ok();
}

// Every rank as a thread of this process, of a layout already checked.
template <typename T>
Status run_threads(const TrainConfig& cfg_in, const JobLayout& layout, const model::LlamaConfig& m, const JobData& data,
                   JobResult<T>* out, std::int64_t stop_after, bool gather) {
  const TrainConfig cfg = with_comm_timeout(cfg_in, m, false);
  const std::int64_t world_size = layout.dims.world();
  // Every rank is a thread of this process, so all of them share this host's memory.
  HERD_RETURN_IF_ERROR(check_host_memory(cfg, m, world_size));
  const comm::CommOptions opts = comm_options(cfg);
  const int saved_threads = kernels::num_threads();
  const int threads =
      cfg.train.threads > 0 ? static_cast<int>(cfg.train.threads) : blas_threads_per_rank(static_cast<int>(world_size));
  kernels::set_num_threads(threads);
  comm::LocalWorld lw(static_cast<int>(world_size), opts);
  std::vector<std::shared_ptr<comm::FlightRecorder>> heartbeats;
  for (int r = 0; r < lw.size(); ++r) heartbeats.push_back(lw.recorder(r));
  WatchdogOptions wo;
  // A second past the collectives' own timeout: where a peer waits on the hung rank, its error (which
  // names the missing ranks) comes first; the watchdog catches ranks that no collective waits on.
  wo.timeout_s = cfg.parallel.comm_timeout_s + 1;
  wo.grace_s = 1.5;
  wo.exit_process = out != nullptr && out->exit_on_hang;
  wo.on_dump = [&lw](const std::string& reason) {
    const std::vector<std::string> files = lw.dump(reason);
    log_info(reason, "; flight recorders dumped to ", files.empty() ? "nowhere" : files.front(),
             files.size() > 1 ? " and " + std::to_string(files.size() - 1) + " more" : "");
  };
  // A rank out of memory is the cause; the peers' errors (a collective it never joined) are the effect.
  std::vector<char> out_of_memory(static_cast<std::size_t>(world_size), 0);
  std::vector<Status> st;
  std::string fired;
  {
    Watchdog dog(
        heartbeats, 0, wo, [&lw](const std::string& reason) { lw.abort(reason); }, [&lw] { return lw.aborted(); });
    st = lw.run([&](comm::Communicator& world) -> Status {
      struct Done {  // the rank is no longer watched once it returns, however it returns
        Watchdog& d;
        int r;
        ~Done() { d.rank_done(r); }
      } done{dog, world.rank()};
      // OpenMP's team size is per thread: a rank's thread starts with the process default (every core),
      // so without this each rank's element-wise and attention kernels ran teams of all cores, ranks x
      // cores threads on the cores (2 thread ranks on 2 cores: 4), and a one-thread rank's GEMMs skipped
      // oneDNN (gemm.cpp picks it for a team of one).
      kernels::set_num_threads(threads);
      try {
        return run_rank_unguarded<T>(world, cfg, layout, m, data, out, stop_after, gather);
      } catch (const std::bad_alloc& e) {
        out_of_memory[static_cast<std::size_t>(world.rank())] = 1;
        return out_of_memory_error(e, cfg, m);
      }
    });
    fired = dog.fired();
  }
  kernels::set_num_threads(saved_threads);
  if (out != nullptr) out->dump_paths = lw.dump_paths();
  for (std::size_t r = 0; r < st.size(); ++r) {
    if (out_of_memory[r]) return st[r].error().with_context("rank " + std::to_string(r));
  }
  Status s = comm::first_error(st);
  if (!fired.empty() && !s.ok()) return make_error(fired, "; ", s.error().message());
  return s;
}

}  // namespace

template <typename T>
Status run_rank(comm::Communicator& world_in, const TrainConfig& cfg, const JobLayout& layout,
                const model::LlamaConfig& m, const JobData& data, JobResult<T>* out, std::int64_t stop_after,
                bool gather) {
  // The rank boundary: running out of memory is a one-line error (out_of_memory.h), not an abort. The
  // rank's objects are gone by the time the handler runs, so what it allocates is small.
  try {
    return run_rank_unguarded<T>(world_in, cfg, layout, m, data, out, stop_after, gather);
  } catch (const std::bad_alloc& e) {
    return out_of_memory_error(e, cfg, m);
  }
}

template <typename T>
Status run_local_job(const TrainConfig& cfg, const model::LlamaConfig& m, const JobData& data, JobResult<T>* out,
                     std::int64_t stop_after, bool gather) {
  HERD_ASSIGN_OR_RETURN(const JobLayout layout, check_layout(cfg, m, cfg.parallel.world()));
  return run_threads<T>(cfg, layout, m, data, out, stop_after, gather);
}

// A GPU rank started as a process: the GPU of its local rank (round-robin over the visible ones) and
// an NCCL communicator over `host_world` for its device buffers; null on the CPU.
Result<std::unique_ptr<comm::Communicator>> device_communicator(comm::Communicator& host_world, const TrainConfig& cfg,
                                                                int local_rank, const comm::CommOptions& opts) {
  HERD_ASSIGN_OR_RETURN(const kernels::Device d, train_device(cfg));
  if (d == kernels::Device::kCpu) return std::unique_ptr<comm::Communicator>();
  const kernels::DeviceBackend* backend = kernels::device_backend(d);
  HERD_CHECK(backend != nullptr, "train.device was checked before the job started");
  const int gpus = std::max(1, backend->device_count(nullptr));
  backend->bind_thread(local_rank % gpus);
#if HERD_HAVE_NCCL
  return comm::nccl::make_communicator(host_world, local_rank % gpus, opts);
#else
  (void)host_world;
  (void)opts;
  return make_error("train.device: '", kernels::device_name(d),
                    "' with ranks as processes needs NCCL, which this herd was built without (CMake did not find "
                    "libnccl in the CUDA toolkit); install it and rebuild, or run the ranks as threads of one process");
#endif
}

template <typename T>
Status run_job(const TrainConfig& cfg_in, const JobInputs& in, const JobLayout& layout, JobResult<T>* out,
               std::int64_t stop_after, bool gather) {
  HERD_ASSIGN_OR_RETURN(const JobLaunch launch, resolve_launch(cfg_in, process_environment()));
  TrainConfig cfg = with_comm_timeout(cfg_in, in.model, launch.lead() && (out == nullptr || !out->quiet));
  if (launch.backend == comm::Backend::kLocal) {
    if (cfg.diagnostics.job_id.empty()) cfg.diagnostics.job_id = make_job_id();
    if (cfg.parallel.world() > 1) {
      log_info("training ", cfg.parallel.tp, " (tp) x ", cfg.parallel.cp, " (cp) x ", cfg.parallel.pp, " (pp) x ",
               cfg.parallel.dp, " (dp) ranks as threads (local backend)");
    }
    return run_threads<T>(cfg, layout, in.model, in.data, out, stop_after, gather);
  }
  // Every rank names its dump after the same job: rank 0's id, broadcast once before training. The
  // first world holds the MPI runtime (MPI is finalised with its last communicator) until the world
  // that carries the id exists.
  auto make_world = [&](const comm::CommOptions& o) -> Result<std::unique_ptr<comm::Communicator>> {
    if (launch.backend == comm::Backend::kMpi) return comm::make_mpi_world(o);
    comm::Rendezvous rv{launch.env.rank, launch.env.world_size, rendezvous_dir(cfg), launch.env.job_key,
                        launch.env.socket_iface};
    return comm::make_gloo_world(o, rv);
  };
  std::unique_ptr<comm::Communicator> first;
  if (cfg.diagnostics.job_id.empty()) {
    HERD_ASSIGN_OR_RETURN(first, make_world(comm_options(cfg)));
    const std::string mine = make_job_id();
    char id[64] = {0};
    std::snprintf(id, sizeof id, "%s", mine.c_str());
    HERD_RETURN_IF_ERROR(first->broadcast(id, sizeof id, DType::kFP8, 0));
    cfg.diagnostics.job_id = id;
  }
  const comm::CommOptions opts = comm_options(cfg);
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> host_world, make_world(opts));
  first.reset();
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> device_world,
                        device_communicator(*host_world, cfg, launch.env.local_rank, opts));
  comm::Communicator* world = device_world ? device_world.get() : host_world.get();
  if (world->rank() == 0 && (out == nullptr || !out->quiet)) {
    log_info("training ", world->size(), " ranks as processes over ", comm::backend_name(launch.backend),
             device_world ? std::string(" (device buffers over NCCL)") : std::string(), "; ", launch.env.describe());
  }
  // This process watches itself: a rank silent past the timeout (hung outside communication; one in a
  // collective is ended by the collective's own timeout first) dumps its recorder and exits, and mpirun
  // then ends the others.
  std::shared_ptr<comm::FlightRecorder> heartbeat = world->recorder_ptr();
  WatchdogOptions wo;
  wo.timeout_s = cfg.parallel.comm_timeout_s + 1;
  wo.grace_s = 0;
  wo.exit_process = true;
  wo.on_dump = [heartbeat, opts](const std::string& reason) {
    Result<std::string> path = heartbeat->dump(opts.dump_dir, opts.job_id, reason);
    log_info(reason, "; flight recorder: ", path.ok() ? *path : path.error().message());
  };
  Watchdog dog({heartbeat}, world->rank(), wo,
               [heartbeat, opts](const std::string& reason) {
                 Result<std::string> path = heartbeat->dump(opts.dump_dir, opts.job_id, reason);
                 log_line(LogLevel::kError, "herd comm: " + reason +
                                                "; flight recorder: " + (path.ok() ? *path : path.error().message()));
               },
               {});
  // One rank per process; how many share this host is mpirun's business, so the check is per rank.
  HERD_RETURN_IF_ERROR(check_host_memory(cfg, in.model, 1));
  kernels::set_num_threads(cfg.train.threads > 0 ? static_cast<int>(cfg.train.threads)
                                                 : blas_threads_per_rank(world->size()));
  Status s = run_rank<T>(*world, cfg, layout, in.model, in.data, out, stop_after, gather);
  dog.rank_done(0);
  if (s.ok()) {
    device_world.reset();  // before the host communicator it was bootstrapped over
    return s;
  }
  const Error e = s.error().with_context("rank " + std::to_string(host_world->rank()));
  if (host_world->size() > 1) {
    // Its peers may be waiting for this rank in a collective, which cannot be cancelled, and returning
    // would block this process in MPI_Finalize, so the error would be printed only after they time out
    // (or never, when their timeout aborts the job first): print it now and end the job.
    log_line(LogLevel::kError, e.message() + "; ending the job (its other ranks may be waiting for this one)");
    comm::abort_job(launch.backend, 1);
  }
  return e;
}

#define HERD_JOB_INSTANTIATE(T)                                                                                     \
  template Status run_rank<T>(comm::Communicator&, const TrainConfig&, const JobLayout&, const model::LlamaConfig&, \
                              const JobData&, JobResult<T>*, std::int64_t, bool);                                   \
  template Status run_job<T>(const TrainConfig&, const JobInputs&, const JobLayout&, JobResult<T>*, std::int64_t,   \
                             bool);                                                                                 \
  template Status run_local_job<T>(const TrainConfig&, const model::LlamaConfig&, const JobData&, JobResult<T>*,    \
                                   std::int64_t, bool);
HERD_JOB_INSTANTIATE(float)
HERD_JOB_INSTANTIATE(double)
#undef HERD_JOB_INSTANTIATE

}  // namespace herd::train
