// The `nccl` backend: collectives on GPU buffers through NCCL, bootstrapped over any other backend.
//
// Compiled only when CMake finds the CUDA toolkit and NCCL (cmake/HerdExternal.cmake builds it as
// the separate library herd_comm_nccl, since herd_comm itself must build without CUDA). Buffers are
// device pointers on the rank's GPU; every op is enqueued on the communicator's own CUDA stream and
// its Handle waits on a CUDA event recorded after it, so host-side waits never block the stream.
// Rank 0 of a group creates the NCCL unique id and broadcasts it over the bootstrap communicator
// (local or mpi), which must outlive the NCCL one; sub-groups are made by splitting the bootstrap
// communicator the same way, so only members take part, as on the other backends.
//
// A training rank passes its device memory (CommOptions::device_memory): then an op on host buffers
// (loss sums, flags, a barrier) runs on the bootstrap communicator instead, and each device op is
// ordered after the work the rank has enqueued on its compute queue (the kernels that wrote the send
// buffer) by an event, so the rank's kernels and the communication stream overlap without a host wait.
//
// Reductions:
//   - comm.deterministic (the default): rank order, as every backend. The parts each rank reduces are
//     exchanged point-to-point (what a ring reduce-scatter moves), summed ((a0 + a1) + a2) ... on the
//     rank's compute queue, and for an all-reduce the reduced parts are gathered back: bit-identical to
//     the local and MPI backends, at the bandwidth of a ring, with one buffer of the op's size.
//   - comm.deterministic=false: NCCL's own ring/tree all_reduce and reduce_scatter.
//   Data movement (all_gather, broadcast, send/recv) is exact in both modes.
// Point-to-point ops match by order per peer; the tag is recorded but not used for matching. On a
// timeout the NCCL communicator is aborted (ncclCommAbort), the flight recorder is dumped and the error
// names the op; NCCL does not say which peer is missing.
#pragma once

#include <memory>
#include <string>

#include "herd/comm/communicator.h"

namespace herd::comm::nccl {

// True when a CUDA device can be used; otherwise `why` holds what the CUDA runtime reported.
bool gpu_available(std::string* why);

// An NCCL communicator over the members of `bootstrap`, using GPU `device` on this rank.
Result<std::unique_ptr<Communicator>> make_communicator(Communicator& bootstrap, int device,
                                                        const CommOptions& options);

}  // namespace herd::comm::nccl
