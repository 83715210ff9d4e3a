// The `gloo` backend: one rank per process over gloo's TCP transport, for jobs whose launcher is not
// MPI (torchrun, srun without PMIx). Compiled when CMake finds gloo (Debian's libgloo-dev).
//
// Start-up: every rank meets the others in a directory (parallel.rendezvous_dir; gloo's FileStore,
// one subdirectory per start of the job, named after the launcher's job key), publishes the address
// of its TCP device there and connects to every peer (a full mesh). Once every rank is connected,
// rank 0 removes the subdirectory. Across hosts the directory must be on storage every host sees.
//
// Collectives are herd's direct algorithms (comm/direct.h) on gloo's point-to-point messages, so the
// results are bit-identical to the local and MPI backends and a timeout names the peer whose data
// never came; comm.deterministic=false changes nothing here. Every group uses the one world
// connection: a message is matched by its slot, a 56-bit hash of the group (its name, members and
// how many such groups this process made before), the op's sequence number or user tag, and the
// stage, so the traffic of any number of groups interleaves.
//
// Progress needs no calls: gloo's own thread moves the bytes. A wait blocks on the op's messages up
// to the communicator's deadline; test() reports completion that a wait has seen, so a sender that
// never waits keeps its buffer until the wait it does later. A timeout or a lost peer fails the op
// with an error naming the op and the peer, dumps the flight recorder and fails every later op of
// the process (gloo's connection is unusable after either); the rank then ends its process
// (abort_job), and the launcher ends the others.
#pragma once

#include <memory>
#include <string>

#include "herd/comm/communicator.h"
#include "herd/comm/world.h"

namespace herd::comm::gloo {

// This process's world communicator: connects on first use, later calls share the connection.
Result<std::unique_ptr<Communicator>> make_world(const CommOptions& options, const Rendezvous& rv);

// Ends this process at once (streams flushed) with `code`, for a rank that failed while its peers may
// be waiting for it: they see the connection close and fail in turn.
[[noreturn]] void abort_job(int code);

}  // namespace herd::comm::gloo
