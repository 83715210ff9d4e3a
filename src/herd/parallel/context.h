// ParallelContext: what one rank of a 4D-parallel job knows about the job.
//
// The mesh (ParallelDims, rank order [TP, CP, PP, DP]), this rank's global rank, and one communicator
// per mesh axis. Every parallel module (parallel/tp, fsdp, cp, pp) takes a ParallelContext by
// reference instead of reaching for a global process group. The context does not own
// its communicators: ParallelGroups (below) builds and owns them for the usual case of one world
// communicator split along the mesh, and tests may point the fields at communicators of their own.
//
// Flags that change the numerics-neutral algorithm choice live here too, so all modules of one rank
// agree: sequence parallelism (Megatron-LM SP: norms and dropout on T/tp rows, all-gather before the
// column-parallel linears and reduce-scatter after the row-parallel ones) and FSDP's
// reshard_after_forward (ZeRO-3 behaviour; the Llama 3 paper keeps the unit gathered until backward).
#pragma once

#include <cstdint>
#include <memory>

#include "herd/comm/communicator.h"
#include "herd/core/error.h"
#include "herd/core/precision.h"
#include "herd/kernels/device.h"
#include "herd/kernels/ops.h"
#include "herd/topology/parallel_dims.h"

namespace herd::parallel {

struct ParallelContext {
  // Degrees of the mesh (a single rank unless set).
  topology::ParallelDims dims = topology::ParallelDims::make(1, 1, 1, 1).value();
  int rank = 0;  // global rank; coordinates via dims.coord(rank)
  comm::Communicator* world = nullptr;
  comm::Communicator* tp = nullptr;  // ranks sharing every coordinate but tp (consecutive ranks)
  comm::Communicator* cp = nullptr;
  comm::Communicator* pp = nullptr;
  comm::Communicator* dp = nullptr;
  // The FSDP group: ranks sharing tp and pp (CP and DP ranks hold different tokens of the same weights,
  // so their gradients are summed and their optimizer state sharded over the combined group, as
  // torchtitan does). Equal to dp when cp = 1; null falls back to dp.
  comm::Communicator* dp_cp = nullptr;
  bool sequence_parallel = true;
  bool reshard_after_forward = false;
  // The run's precision (`train.precision`). kBF16 (float models only): FSDP gathers bf16 copies of the
  // fp32 master shards, the layers run in bf16 mode (nn/block.h), the head's matmuls take bf16 inputs.
  // Not numerics-neutral like the two above, but a choice every module of a rank must agree on, so it
  // lives here too. fp32 and fp64 are the model's type itself.
  Precision precision = Precision::kFP32;
  bool bf16() const { return precision == Precision::kBF16; }
  // Where the rank's kernels run (`train.device`): every module of the rank runs its kernels, copies and
  // sums through this device's op interface (kernels/ops.h) and allocates its buffers there.
  kernels::Device device = kernels::Device::kCpu;
  const kernels::Ops& ops() const { return kernels::ops_for(device); }

  topology::Coord coord() const { return dims.coord(rank); }
  int tp_rank() const { return static_cast<int>(coord().tp); }
  int cp_rank() const { return static_cast<int>(coord().cp); }
  int pp_rank() const { return static_cast<int>(coord().pp); }
  int dp_rank() const { return static_cast<int>(coord().dp); }
  int tp_size() const { return static_cast<int>(dims.tp()); }
  int cp_size() const { return static_cast<int>(dims.cp()); }
  int pp_size() const { return static_cast<int>(dims.pp()); }
  int dp_size() const { return static_cast<int>(dims.dp()); }
  comm::Communicator* fsdp() const { return dp_cp ? dp_cp : dp; }
};

// Owns the four axis communicators of one rank, split from its world communicator. Every rank of the
// world must call make() with the same dims, in the same order relative to its other collectives
// (new_group is collective-ordered, as with MPI). The world communicator must outlive this object.
class ParallelGroups {
 public:
  // Errors when dims.world() differs from the world communicator's size, naming both.
  static Result<std::unique_ptr<ParallelGroups>> make(comm::Communicator& world, const topology::ParallelDims& dims);

  // A context pointing at these groups; the flags are the caller's choice.
  ParallelContext context(bool sequence_parallel = true, bool reshard_after_forward = false) const;

  comm::Communicator& world() const { return *world_; }
  comm::Communicator& tp() const { return *tp_; }
  comm::Communicator& cp() const { return *cp_; }
  comm::Communicator& pp() const { return *pp_; }
  comm::Communicator& dp() const { return *dp_; }
  comm::Communicator& dp_cp() const { return dp_cp_ ? *dp_cp_ : *dp_; }
  const topology::ParallelDims& dims() const { return dims_; }

 private:
  ParallelGroups(comm::Communicator& world, topology::ParallelDims dims) : world_(&world), dims_(dims) {}
  comm::Communicator* world_;
  topology::ParallelDims dims_;
  std::unique_ptr<comm::Communicator> tp_, cp_, pp_, dp_, dp_cp_;  // dp_cp_ only when cp > 1
};

}  // namespace herd::parallel
