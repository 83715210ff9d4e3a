// The rank launcher: local threads or one mpirun-started process per rank, each running the Trainer.
#include "herd/train/job/launch.h"

#include <algorithm>

#include "herd/comm/local/local_world.h"
#include "herd/core/cores.h"
#include "herd/core/log.h"
#include "herd/kernels/gemm.h"
#include "herd/measure/comm_timer.h"
#include "herd/train/job/watchdog.h"
#include "herd/train/step/out_of_memory.h"
#include "herd/train/step/trainer.h"

namespace herd::train {

int blas_threads_per_rank(int ranks) {
  const int cores = usable_cores();
  return std::max(1, cores / std::max(1, ranks));
}

namespace {

template <typename T>
Status run_rank_unguarded(comm::Communicator& world_in, const TrainConfig& cfg, const model::LlamaConfig& m,
                          const JobData& data, const RankModelFactory<T>& factory, JobResult<T>* out,
                          std::int64_t stop_after, bool gather) {
  // Every group is split from the timed world, so the time spent waiting on any collective is counted.
  measure::TimedCommunicator world(world_in);
  HERD_ASSIGN_OR_RETURN(
      topology::ParallelDims dims,
      topology::ParallelDims::make(cfg.parallel.tp, cfg.parallel.cp, cfg.parallel.pp, cfg.parallel.dp, world.size()));
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<parallel::ParallelGroups> groups, parallel::ParallelGroups::make(world, dims));
  parallel::ParallelContext ctx = groups->context(cfg.parallel.sequence_parallel, cfg.parallel.reshard_after_forward);
  ctx.precision = cfg.train.precision;
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<RankModel<T>> model, factory(ctx, m, cfg));
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<Trainer<T>> trainer,
                        Trainer<T>::make(cfg, m, ctx, std::move(model), data.train, data.val));
  trainer->quiet = out != nullptr && (world.rank() != 0 || out->quiet);
  trainer->step_clock = out != nullptr && out->step_clock ? out->step_clock(world.rank())
                                                          : measured_step_clock([&world] { return world.totals(); });
  trainer->heartbeat = [beat = world_in.recorder_ptr()](const std::string& what) { beat->beat(what); };
  trainer->recorder = world_in.recorder_ptr();
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

}  // namespace

template <typename T>
Status run_rank(comm::Communicator& world_in, const TrainConfig& cfg, const model::LlamaConfig& m, const JobData& data,
                const RankModelFactory<T>& factory, JobResult<T>* out, std::int64_t stop_after, bool gather) {
  // The rank boundary: running out of memory is a one-line error (out_of_memory.h), not an abort. The
  // rank's objects are gone by the time the handler runs, so what it allocates is small.
  try {
    return run_rank_unguarded<T>(world_in, cfg, m, data, factory, out, stop_after, gather);
  } catch (const std::bad_alloc& e) {
    return out_of_memory_error(e, cfg, m);
  }
}

template <typename T>
Status run_local_job(const TrainConfig& cfg_in, const model::LlamaConfig& m, const JobData& data,
                     const RankModelFactory<T>& factory, JobResult<T>* out, std::int64_t stop_after, bool gather) {
  const TrainConfig cfg = with_comm_timeout(cfg_in, m, false);
  const std::int64_t world_size = cfg.parallel.world();
  // Refused before any rank starts: the layout must fit the model and the batch.
  HERD_RETURN_IF_ERROR(check_layout(cfg, m, world_size));
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
        return run_rank_unguarded<T>(world, cfg, m, data, factory, out, stop_after, gather);
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

template Status run_rank<float>(comm::Communicator&, const TrainConfig&, const model::LlamaConfig&, const JobData&,
                                const RankModelFactory<float>&, JobResult<float>*, std::int64_t, bool);
template Status run_rank<double>(comm::Communicator&, const TrainConfig&, const model::LlamaConfig&, const JobData&,
                                 const RankModelFactory<double>&, JobResult<double>*, std::int64_t, bool);
template Status run_local_job<float>(const TrainConfig&, const model::LlamaConfig&, const JobData&,
                                     const RankModelFactory<float>&, JobResult<float>*, std::int64_t, bool);
template Status run_local_job<double>(const TrainConfig&, const model::LlamaConfig&, const JobData&,
                                      const RankModelFactory<double>&, JobResult<double>*, std::int64_t, bool);

}  // namespace herd::train
