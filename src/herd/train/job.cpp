// run_parallel_job: shards -> model config -> layout check -> ranks on the chosen backend.
#include "herd/train/job.h"

#include "herd/core/log.h"
#include "herd/kernels/gemm.h"
#include "herd/train/dist_trainer.h"

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

template <typename T>
Status run_parallel_job(const TrainConfig& cfg, const RankModelFactory<T>& factory, JobResult<T>* out) {
  HERD_ASSIGN_OR_RETURN(comm::Backend backend, resolve_backend(cfg));
  HERD_ASSIGN_OR_RETURN(data::TokenDocuments train, data::read_split(cfg.data.dir, "train"));
  HERD_ASSIGN_OR_RETURN(model::LlamaConfig m, resolve_model_config(cfg, train.vocab_size));
  auto docs = std::make_shared<const data::TokenDocuments>(std::move(train));
  if (backend == comm::Backend::kLocal) {
    log_info("training ", cfg.parallel.tp, " (tp) x ", cfg.parallel.cp, " (cp) x ", cfg.parallel.pp, " (pp) x ",
             cfg.parallel.dp, " (dp) ranks as threads (local backend)");
    return run_local_job<T>(cfg, m, docs, factory, out, 0, /*gather=*/false);
  }
  const comm::CommOptions opts = comm_options(cfg);
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::make_mpi_world(opts));
  // Every rank checks the layout before the first collective, so a bad layout stops all of them alike.
  HERD_RETURN_IF_ERROR(check_layout(cfg, m, world->size()));
  kernels::set_num_threads(cfg.train.threads > 0 ? static_cast<int>(cfg.train.threads)
                                                 : blas_threads_per_rank(world->size()));
  Status s = run_rank<T>(*world, cfg, m, docs, factory, out, 0, /*gather=*/false);
  if (!s.ok()) return s.error().with_context("rank " + std::to_string(world->rank()));
  return s;
}

template Status run_parallel_job<float>(const TrainConfig&, const RankModelFactory<float>&, JobResult<float>*);
template Status run_parallel_job<double>(const TrainConfig&, const RankModelFactory<double>&, JobResult<double>*);

}  // namespace herd::train
