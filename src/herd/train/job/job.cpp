// run_job: shards -> model config -> layout check -> ranks on the chosen backend.
#include "herd/train/job/job.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>

#include "herd/core/log.h"
#include "herd/kernels/gemm.h"
#include "herd/train/step/out_of_memory.h"
#include "herd/train/step/trainer.h"
#include "herd/train/job/watchdog.h"

namespace herd::train {

std::string make_job_id() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d-%02d%02d%02d-%ld", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long>(getpid()));
  return buf;
}

Result<comm::Backend> resolve_backend(const TrainConfig& cfg) {
  if (cfg.parallel.backend == "auto") return comm::default_backend();
  HERD_ASSIGN_OR_RETURN(comm::Backend b, comm::parse_backend(cfg.parallel.backend));
  if (b == comm::Backend::kMpi && !comm::launched_by_mpirun()) {
    return make_error("parallel.backend=mpi but this process was not started by mpirun; run it as ",
                      "`mpirun -np N herd train ...` or use parallel.backend=local");
  }
  return b;
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

template <typename T>
Status run_job(const TrainConfig& cfg_in, const JobInputs& in, const RankModelFactory<T>& factory, JobResult<T>* out,
               std::int64_t stop_after, bool gather) {
  HERD_ASSIGN_OR_RETURN(comm::Backend backend, resolve_backend(cfg_in));
  const bool lead = backend != comm::Backend::kMpi || comm::launcher_rank() == 0;
  TrainConfig cfg = with_comm_timeout(cfg_in, in.model, lead && (out == nullptr || !out->quiet));
  if (backend == comm::Backend::kLocal) {
    if (cfg.diagnostics.job_id.empty()) cfg.diagnostics.job_id = make_job_id();
    if (cfg.parallel.world() > 1) {
      log_info("training ", cfg.parallel.tp, " (tp) x ", cfg.parallel.cp, " (cp) x ", cfg.parallel.pp, " (pp) x ",
               cfg.parallel.dp, " (dp) ranks as threads (local backend)");
    }
    return run_local_job<T>(cfg, in.model, in.data, factory, out, stop_after, gather);
  }
  // Every rank names its dump after the same job: rank 0's id, broadcast once before training. The
  // first world holds the MPI runtime (MPI is finalised with its last communicator) until the world
  // that carries the id exists.
  std::unique_ptr<comm::Communicator> first;
  if (cfg.diagnostics.job_id.empty()) {
    HERD_ASSIGN_OR_RETURN(first, comm::make_mpi_world(comm_options(cfg)));
    const std::string mine = make_job_id();
    char id[64] = {0};
    std::snprintf(id, sizeof id, "%s", mine.c_str());
    HERD_RETURN_IF_ERROR(first->broadcast(id, sizeof id, DType::kFP8, 0));
    cfg.diagnostics.job_id = id;
  }
  const comm::CommOptions opts = comm_options(cfg);
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::make_mpi_world(opts));
  first.reset();
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
  // Every rank checks the layout before the first collective, so a bad layout stops all of them alike.
  HERD_RETURN_IF_ERROR(check_layout(cfg, in.model, world->size()));
  // One rank per process; how many share this host is mpirun's business, so the check is per rank.
  HERD_RETURN_IF_ERROR(check_host_memory(cfg, in.model, 1));
  kernels::set_num_threads(cfg.train.threads > 0 ? static_cast<int>(cfg.train.threads)
                                                 : blas_threads_per_rank(world->size()));
  Status s = run_rank<T>(*world, cfg, in.model, in.data, factory, out, stop_after, gather);
  dog.rank_done(0);
  if (s.ok()) return s;
  const Error e = s.error().with_context("rank " + std::to_string(world->rank()));
  if (world->size() > 1) {
    // Its peers may be waiting for this rank in a collective, which cannot be cancelled, and returning
    // would block this process in MPI_Finalize, so the error would be printed only after they time out
    // (or never, when their timeout aborts the job first): print it now and end the job.
    log_line(LogLevel::kError, e.message() + "; ending the job (its other ranks may be waiting for this one)");
    comm::abort_mpi_job(1);
  }
  return e;
}

template Status run_job<float>(const TrainConfig&, const JobInputs&, const RankModelFactory<float>&, JobResult<float>*,
                               std::int64_t, bool);
template Status run_job<double>(const TrainConfig&, const JobInputs&, const RankModelFactory<double>&,
                                JobResult<double>*, std::int64_t, bool);

}  // namespace herd::train
