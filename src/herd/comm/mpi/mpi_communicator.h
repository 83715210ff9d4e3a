// The `mpi` backend: one rank per process, over OpenMPI, for runs started by mpirun.
//
// Two ways to run a collective, chosen by CommOptions::deterministic:
//   - deterministic (default): herd's own algorithms on MPI point-to-point. All-reduce is a direct
//     reduce-scatter (rank r receives chunk r of every peer's input and reduces it in rank order with
//     comm/reduce.h) followed by a direct all-gather of the reduced chunks, so results are bit-identical
//     to the local backend and to a sequential rank-order sum, whatever the group size. Because every
//     byte comes from a known peer, a timeout names the peers whose data never arrived.
//   - native: MPI's own non-blocking collectives (MPI_Iallreduce, ...), which may use any reduction
//     order; faster for small messages, but a timeout can only say that the collective hung.
// Sub-groups are made with MPI_Comm_create_group (collective over the members only, so each rank
// creates just the groups it belongs to). Every group holds two duplicated MPI communicators: one for
// herd's collective traffic, one for user send/recv, so user tags cannot collide with herd's.
//
// Waits poll MPI_Testall with back-off (never forcing busy-waiting, which ruins oversubscribed runs)
// and advance every pending op of the process, in posting order. At the deadline the rank logs the
// error naming the op and the missing peers, dumps its flight recorder and calls MPI_Abort: an MPI
// collective cannot be cancelled, so no rank can safely carry on. Every MPI call is checked by
// HERD_MPI_CHECK, which names the call, the rank and the host.
#pragma once

#include <memory>

#include "herd/comm/communicator.h"

namespace herd::comm::mpi {

// Initializes MPI on first use (MPI_THREAD_FUNNELED: only the main thread talks to MPI) and returns
// this process's world communicator. MPI is finalized when the last communicator is destroyed.
Result<std::unique_ptr<Communicator>> make_world(const CommOptions& options);

// Ends every process of the job (MPI_Abort with `code`) when MPI is initialised and not finalised;
// returns otherwise.
void abort_job(int code);

}  // namespace herd::comm::mpi
