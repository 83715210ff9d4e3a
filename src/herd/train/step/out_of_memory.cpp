// The host-memory check and the out-of-memory line of a rank (contract in the header).
#include "herd/train/step/out_of_memory.h"

#include <unistd.h>

#include <string>

#include "herd/core/aligned.h"
#include "herd/core/format.h"
#include "herd/train/plan/projection.h"

namespace herd::train {

namespace {

const char* const kFix =
    "; lower parallel.microbatch_size or data.seq_len, add ranks (parallel.dp, tp, pp) or use a smaller model";

double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

// The planner's memory per rank for this run, or an error when it cannot be projected.
Result<double> planned_bytes_per_rank(const TrainConfig& cfg, const model::LlamaConfig& m) {
  HERD_ASSIGN_OR_RETURN(const ResolvedLayout layout, resolve_layout(cfg));
  HERD_ASSIGN_OR_RETURN(const topology::Cluster cluster, local_cpu_cluster(cfg.projection.cluster_file));
  HERD_ASSIGN_OR_RETURN(const Projection p, project(m, layout, static_cast<int>(cfg.train.threads), cluster));
  return p.memory_bytes();
}

std::string per_rank_text(double per_rank, std::int64_t ranks, const char* where) {
  return "the planner estimates " + format_bytes(per_rank) + " per rank for this layout (" +
         format_bytes(per_rank * static_cast<double>(ranks)) + " for its " + std::to_string(ranks) +
         (ranks == 1 ? " rank" : " ranks") + where + ")";
}

}  // namespace

Status check_host_memory(const TrainConfig& cfg, const model::LlamaConfig& m, std::int64_t ranks_on_host) {
  const double host = host_memory_bytes();
  const Result<double> per_rank = planned_bytes_per_rank(cfg, m);
  if (host <= 0 || !per_rank.ok()) return Status::Ok();
  if (*per_rank * static_cast<double>(ranks_on_host) <= kHostMemoryMargin * host) return Status::Ok();
  return make_error(per_rank_text(*per_rank, ranks_on_host, " on this host"), ", beyond this host's ",
                    format_bytes(host), kFix);
}

Error out_of_memory_error(const std::bad_alloc& e, const TrainConfig& cfg, const model::LlamaConfig& m) {
  std::string line = "out of memory: ";
  if (const auto* failed = dynamic_cast<const AllocationFailed*>(&e)) {
    line += "an allocation of " + format_bytes(static_cast<double>(failed->bytes())) + " (" +
            std::to_string(failed->bytes()) + " bytes) failed";
  } else {
    line += "an allocation failed (" + std::string(e.what()) + ", size not recorded)";
  }
  // Nothing here may throw out of the handler: without the planner's figure the line still goes out.
  try {
    const Result<double> per_rank = planned_bytes_per_rank(cfg, m);
    if (per_rank.ok()) line += "; " + per_rank_text(*per_rank, cfg.parallel.world(), "");
  } catch (const std::exception&) {
  }
  const double host = host_memory_bytes();
  if (host > 0) line += " and this host has " + format_bytes(host);
  return Error(line + kFix);
}

}  // namespace herd::train
