// Vocabulary of the communication layer: element types, reductions, operation kinds and options.
//
// Collectives move raw buffers (void* + element count + herd::DType, which includes the two integer
// types that counts and indices need). Only fp32, fp64, i32 and i64 can be reduced; the 16- and 8-bit
// floats are moved (gathered, broadcast, sent) but never summed here, because herd reduces gradients
// in FP32 (the Llama 3 paper's FSDP setting).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "herd/core/dtype.h"
#include "herd/core/error.h"

namespace herd::comm {

class DeviceMemory;  // comm/device_memory.h

enum class ReduceOp { kSum, kMax, kMin };
enum class OpKind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kSend, kRecv, kBarrier };

bool is_reducible(DType t);            // fp32, fp64, i32, i64
const char* reduce_name(ReduceOp op);  // "sum", "max", "min"
const char* op_name(OpKind op);        // "all_reduce", "all_gather", ...
bool is_collective(OpKind op);         // everything but send and recv

// What happens on a timeout or a failed peer. Every wait has a deadline; none blocks forever.
struct CommOptions {
  // Seconds a wait may block before the op is declared hung. Production jobs wait long (a slow
  // checkpoint on one rank is not a hang); tests set a fraction of a second.
  // `herd train` fills these from its configuration (train::comm_options: parallel.comm_timeout_s and
  // the comm section); the defaults here are the configuration's.
  double timeout_s = 300.0;
  // Fixed rank-order reduction ((a0 + a1) + a2) + ... for every element (comm.deterministic,
  // default on). The local backend is always deterministic; over MPI it means herd's own
  // point-to-point algorithms instead of MPI's collectives (see docs/comm.md for the cost).
  bool deterministic = true;
  // Where flight-recorder dumps go on a failure (diagnostics.dir resolved; empty: the system temp dir).
  std::string dump_dir;
  // Names the dumps, herd_flight_<job_id>_rank<r>.json (diagnostics.job_id); empty: the backend makes
  // one (the process id and a counter for local worlds, "mpi" for MPI).
  std::string job_id;
  // Entries kept per rank by the flight recorder (comm.recorder_size).
  std::size_t recorder_capacity = 2048;
  // The rank's device memory when it trains on a GPU (comm/device_memory.h); null: every buffer is host
  // memory.
  std::shared_ptr<const DeviceMemory> device_memory;
};

// A point-to-point tag for pipeline traffic, unique per (micro-batch, virtual stage, direction), and
// below 32768, the smallest MPI_TAG_UB the MPI standard allows. Errors when it would not fit.
Result<int> p2p_tag(int micro_batch, int virtual_stage, bool backward, int n_virtual_stages);

}  // namespace herd::comm
