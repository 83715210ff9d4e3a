// Builds the per-axis communicators of one rank from its world communicator.
#include "herd/parallel/context.h"

namespace herd::parallel {

Result<std::unique_ptr<ParallelGroups>> ParallelGroups::make(comm::Communicator& world,
                                                             const topology::ParallelDims& dims) {
  if (dims.world() != world.size()) {
    return make_error("parallel layout ", dims.to_string(), " needs ", dims.world(), " ranks but the world has ",
                      world.size(), "; choose degrees whose product is ", world.size());
  }
  std::unique_ptr<ParallelGroups> g(new ParallelGroups(world, dims));
  // Same order on every rank: new_group is matched by call order.
  HERD_ASSIGN_OR_RETURN(g->tp_, world.new_group(dims, {topology::Dim::kTP}));
  HERD_ASSIGN_OR_RETURN(g->cp_, world.new_group(dims, {topology::Dim::kCP}));
  HERD_ASSIGN_OR_RETURN(g->pp_, world.new_group(dims, {topology::Dim::kPP}));
  HERD_ASSIGN_OR_RETURN(g->dp_, world.new_group(dims, {topology::Dim::kDP}));
  if (dims.cp() > 1) {
    HERD_ASSIGN_OR_RETURN(g->dp_cp_, world.new_group(dims, {topology::Dim::kCP, topology::Dim::kDP}));
  }
  return g;
}

ParallelContext ParallelGroups::context(bool sequence_parallel, bool reshard_after_forward) const {
  ParallelContext ctx;
  ctx.dims = dims_;
  ctx.rank = world_->global_rank();
  ctx.world = world_;
  ctx.tp = tp_.get();
  ctx.cp = cp_.get();
  ctx.pp = pp_.get();
  ctx.dp = dp_.get();
  ctx.dp_cp = dp_cp_ ? dp_cp_.get() : dp_.get();
  ctx.sequence_parallel = sequence_parallel;
  ctx.reshard_after_forward = reshard_after_forward;
  return ctx;
}

}  // namespace herd::parallel
