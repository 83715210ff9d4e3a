// run_job: shards -> model config -> layout check -> ranks on the chosen backend.
#include "herd/train/job.h"

#include "herd/core/log.h"
#include "herd/kernels/gemm.h"
#include "herd/train/out_of_memory.h"
#include "herd/train/trainer.h"

namespace herd::train {

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
Status run_job(const TrainConfig& cfg, const JobInputs& in, const RankModelFactory<T>& factory, JobResult<T>* out,
               std::int64_t stop_after, bool gather) {
  HERD_ASSIGN_OR_RETURN(comm::Backend backend, resolve_backend(cfg));
  if (backend == comm::Backend::kLocal) {
    if (cfg.parallel.world() > 1) {
      log_info("training ", cfg.parallel.tp, " (tp) x ", cfg.parallel.cp, " (cp) x ", cfg.parallel.pp, " (pp) x ",
               cfg.parallel.dp, " (dp) ranks as threads (local backend)");
    }
    return run_local_job<T>(cfg, in.model, in.data, factory, out, stop_after, gather);
  }
  const comm::CommOptions opts = comm_options(cfg);
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::make_mpi_world(opts));
  // Every rank checks the layout before the first collective, so a bad layout stops all of them alike.
  HERD_RETURN_IF_ERROR(check_layout(cfg, in.model, world->size()));
  // One rank per process; how many share this host is mpirun's business, so the check is per rank.
  HERD_RETURN_IF_ERROR(check_host_memory(cfg, in.model, 1));
  kernels::set_num_threads(cfg.train.threads > 0 ? static_cast<int>(cfg.train.threads)
                                                 : blas_threads_per_rank(world->size()));
  Status s = run_rank<T>(*world, cfg, in.model, in.data, factory, out, stop_after, gather);
  if (!s.ok()) return s.error().with_context("rank " + std::to_string(world->rank()));
  return s;
}

template Status run_job<float>(const TrainConfig&, const JobInputs&, const RankModelFactory<float>&, JobResult<float>*,
                               std::int64_t, bool);
template Status run_job<double>(const TrainConfig&, const JobInputs&, const RankModelFactory<double>&,
                                JobResult<double>*, std::int64_t, bool);

}  // namespace herd::train
