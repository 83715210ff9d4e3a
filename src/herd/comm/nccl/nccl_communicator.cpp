// The NCCL backend: NCCL communicators per group, ops on a per-group stream, event-based handles.
#include "herd/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "herd/comm/device_memory.h"
#include "herd/comm/reduce.h"
#include "herd/core/format.h"
#include "herd/core/launch_env.h"
#include "herd/core/log.h"

namespace herd::comm::nccl {
namespace {

std::string where(int rank) { return "global rank " + std::to_string(rank) + " (host " + this_host() + ")"; }

// Every CUDA and NCCL call is checked; a failure becomes an error naming the call, rank and host.
#define HERD_CUDA_TRY(call, rank)                                                              \
  do {                                                                                         \
    const cudaError_t herd_e_ = (call);                                                        \
    if (herd_e_ != cudaSuccess) {                                                              \
      return make_error(#call, " failed on ", where(rank), ": ", cudaGetErrorString(herd_e_)); \
    }                                                                                          \
  } while (0)
#define HERD_NCCL_TRY(call, rank)                                                              \
  do {                                                                                         \
    const ncclResult_t herd_r_ = (call);                                                       \
    if (herd_r_ != ncclSuccess) {                                                              \
      return make_error(#call, " failed on ", where(rank), ": ", ncclGetErrorString(herd_r_)); \
    }                                                                                          \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kFP8: return ncclUint8;  // moved, never reduced
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

// NCCL state of one group; the bootstrap communicator of a sub-group is owned here.
struct NcclGroup {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  int* barrier_buf = nullptr;  // one device int for barrier()
  std::unique_ptr<Communicator> owned_bootstrap;
  Communicator* bootstrap = nullptr;
  ~NcclGroup() {
    if (comm != nullptr) ncclCommDestroy(comm);
    if (barrier_buf != nullptr) cudaFree(barrier_buf);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclGroup> g, cudaEvent_t ev, std::string what, std::uint64_t record_id,
           FlightRecorder* recorder, const CommOptions& o, int global_rank)
      : g_(std::move(g)),
        ev_(ev),
        what_(std::move(what)),
        id_(record_id),
        recorder_(recorder),
        opts_(o),
        global_(global_rank) {}
  ~NcclWork() override {
    if (ev_ != nullptr) cudaEventDestroy(ev_);
  }

  bool test() override {
    if (done_) return true;
    const cudaError_t q = cudaEventQuery(ev_);
    if (q == cudaErrorNotReady) return check_async();
    finish(q == cudaSuccess ? Status::Ok() : Status(make_error(what_, ": ", cudaGetErrorString(q))),
           q == cudaSuccess ? OpState::kCompleted : OpState::kFailed);
    return true;
  }

  Status wait() override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                                 std::chrono::duration<double>(opts_.timeout_s));
    while (!test()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        recorder_->set_state(id_, OpState::kTimedOut);
        ncclCommAbort(g_->comm);
        g_->comm = nullptr;
        const std::string reason = "timeout after " + format_seconds(opts_.timeout_s) + " on " + where(global_) + ": " +
                                   what_ + "; NCCL communicator aborted";
        Result<std::string> path = recorder_->dump(opts_.dump_dir, "nccl", reason);
        log_line(LogLevel::kError,
                 "herd comm: " + reason + "; flight recorder: " + (path.ok() ? *path : path.error().message()));
        done_ = true;
        status_ = make_error(reason);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return status_;
  }

 private:
  bool check_async() {
    ncclResult_t async = ncclSuccess;
    if (g_->comm != nullptr && ncclCommGetAsyncError(g_->comm, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      finish(make_error(what_, ": NCCL reported ", ncclGetErrorString(async)), OpState::kFailed);
      return true;
    }
    return false;
  }
  void finish(Status s, OpState st) {
    done_ = true;
    status_ = std::move(s);
    recorder_->set_state(id_, st);
  }

  std::shared_ptr<NcclGroup> g_;
  cudaEvent_t ev_;
  std::string what_;
  std::uint64_t id_;
  FlightRecorder* recorder_;
  CommOptions opts_;
  int global_;
  bool done_ = false;
  Status status_;
};

// An op on host buffers, carried by the bootstrap communicator (NCCL moves device memory only).
class HostWork final : public Work {
 public:
  HostWork(Handle h, std::uint64_t record_id, FlightRecorder* recorder)
      : h_(std::move(h)), id_(record_id), recorder_(recorder) {}
  bool test() override {
    if (!done_ && h_.test()) finish(h_.wait());
    return done_;
  }
  Status wait() override {
    if (!done_) finish(h_.wait());
    return status_;
  }

 private:
  void finish(Status s) {
    done_ = true;
    recorder_->set_state(id_, s.ok() ? OpState::kCompleted : OpState::kFailed);
    status_ = std::move(s);
  }
  Handle h_;
  std::uint64_t id_;
  FlightRecorder* recorder_;
  bool done_ = false;
  Status status_;
};

Result<std::shared_ptr<NcclGroup>> init_group(Communicator& bootstrap, int device) {
  const int me = bootstrap.global_rank();
  auto g = std::make_shared<NcclGroup>();
  g->device = device;
  g->bootstrap = &bootstrap;
  HERD_CUDA_TRY(cudaSetDevice(device), me);
  ncclUniqueId id;
  if (bootstrap.rank() == 0) HERD_NCCL_TRY(ncclGetUniqueId(&id), me);
  HERD_RETURN_IF_ERROR(bootstrap.broadcast(&id, sizeof id, DType::kFP8, 0));
  HERD_CUDA_TRY(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), me);
  HERD_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&g->barrier_buf), sizeof(int)), me);
  HERD_NCCL_TRY(ncclCommInitRank(&g->comm, bootstrap.size(), id, bootstrap.rank()), me);
  return g;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclGroup> g, const CommOptions& o)
      : Communicator(Identity{g->bootstrap->name(), g->bootstrap->group_id(), g->bootstrap->members(),
                              g->bootstrap->global_rank()},
                     g->bootstrap->recorder_ptr(), o),
        g_(std::move(g)) {}

  const char* backend() const override { return "nccl"; }

  Result<std::unique_ptr<Communicator>> new_group(const std::vector<std::int64_t>& global_ranks,
                                                  const std::string& name) override {
    HERD_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> boot, g_->bootstrap->new_group(global_ranks, name));
    HERD_ASSIGN_OR_RETURN(std::shared_ptr<NcclGroup> g, init_group(*boot, g_->device));
    g->owned_bootstrap = std::move(boot);
    return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(g), options()));
  }

 protected:
  std::shared_ptr<Work> post(const OpDesc& op) override {
    if (!on_device(op)) return std::make_shared<HostWork>(post_host(op), op.record_id, &recorder());
    Result<std::shared_ptr<Work>> w = enqueue(op);
    if (w.ok()) return *w;
    recorder().set_state(op.record_id, OpState::kFailed);
    return std::make_shared<FailedWork>(w.error());
  }

 private:
  const DeviceMemory* memory() const { return options().device_memory.get(); }

  // Without device memory (CommOptions::device_memory) every buffer is taken for device memory, as a
  // caller that only hands NCCL device buffers does; with it, an op on host buffers (and a barrier)
  // goes to the bootstrap communicator.
  bool on_device(const OpDesc& op) const { return memory() == nullptr || memory()->holds_either(op.send, op.recv); }

  Handle post_host(const OpDesc& op) {
    Communicator& b = *g_->bootstrap;
    switch (op.kind) {
      case OpKind::kAllReduce: return b.iall_reduce(op.send, op.recv, op.count, op.elem, op.reduce);
      case OpKind::kAllGather: return b.iall_gather(op.send, op.recv, op.count, op.elem);
      case OpKind::kReduceScatter: return b.ireduce_scatter(op.send, op.recv, op.count, op.elem, op.reduce);
      case OpKind::kBroadcast: return b.ibroadcast(op.recv, op.count, op.elem, op.peer);
      case OpKind::kSend: return b.isend(op.send, op.count, op.elem, op.peer, op.tag);
      case OpKind::kRecv: return b.irecv(op.recv, op.count, op.elem, op.peer, op.tag);
      case OpKind::kBarrier: return b.ibarrier();
    }
    return b.ibarrier();
  }

  // Every rank sends part p of its buffer to rank p and receives its own part from every rank into
  // `parts` (rank-major), on the group's stream: the data movement of a reduce-scatter. part(p) gives
  // (offset, count) in elements; this rank's own part is copied.
  template <typename Part>
  Status exchange(const void* send, void* parts, std::size_t own_count, Part part, ncclDataType_t t, std::size_t eb) {
    const int me = global_rank();
    HERD_NCCL_TRY(ncclGroupStart(), me);
    for (int p = 0; p < size(); ++p) {
      const auto [off, cnt] = part(p);
      const char* src = static_cast<const char*>(send) + off * eb;
      char* dst = static_cast<char*>(parts) + static_cast<std::size_t>(p) * own_count * eb;
      if (p == rank()) {
        if (cnt > 0) HERD_CUDA_TRY(cudaMemcpyAsync(dst, src, cnt * eb, cudaMemcpyDeviceToDevice, g_->stream), me);
        continue;
      }
      if (cnt > 0) HERD_NCCL_TRY(ncclSend(src, cnt, t, p, g_->comm, g_->stream), me);
      if (own_count > 0) HERD_NCCL_TRY(ncclRecv(dst, own_count, t, p, g_->comm, g_->stream), me);
    }
    HERD_NCCL_TRY(ncclGroupEnd(), me);
    return Status::Ok();
  }

  // `from` waits, on the device, for the work enqueued so far on `to_wait_for`.
  Status order(cudaStream_t from, cudaStream_t to_wait_for) {
    const int me = global_rank();
    cudaEvent_t ev = nullptr;
    HERD_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), me);
    const cudaError_t r = cudaEventRecord(ev, to_wait_for);
    const cudaError_t w = r == cudaSuccess ? cudaStreamWaitEvent(from, ev, 0) : r;
    cudaEventDestroy(ev);  // released once the wait is satisfied
    HERD_CUDA_TRY(w, me);
    return Status::Ok();
  }

  // A reduction in rank order (the deterministic contract of every backend): the parts each rank
  // reduces are exchanged by point-to-point (the same bytes as NCCL's ring reduce-scatter moves), then
  // summed ((a0 + a1) + a2) ... on the rank's compute queue by the device memory's ordered reduction,
  // and for an all-reduce the reduced parts gathered back. The result is bit-identical to the local and
  // MPI backends' on the same inputs. Returns the stream the op's completion is recorded on.
  Result<cudaStream_t> deterministic_reduce(const OpDesc& op) {
    const int me = global_rank();
    const DeviceMemory* dm = memory();
    if (dm == nullptr || dm->queue() == nullptr) {
      return make_error(op_name(op.kind), " #", op.seq, " on ", describe(),
                        ": a rank-order reduction on NCCL needs the rank's device memory (CommOptions::device_memory); "
                        "set comm.deterministic=false for NCCL's own order");
    }
    auto queue = static_cast<cudaStream_t>(dm->queue());
    const ncclDataType_t t = nccl_type(op.elem);
    const std::size_t eb = dtype_bytes(op.elem);
    const int n = size();
    const bool all = op.kind == OpKind::kAllReduce;
    const auto [mb, me_end] = all ? chunk_range(op.count, n, rank()) : std::pair<std::size_t, std::size_t>{0, op.count};
    const std::size_t own = me_end - mb;
    void* parts = dm->allocate(std::max<std::size_t>(1, own * static_cast<std::size_t>(n) * eb));
    Status moved = exchange(
        op.send, parts, own,
        [&](int p) {
          if (all) {
            const auto [b, e] = chunk_range(op.count, n, p);
            return std::pair<std::size_t, std::size_t>{b, e - b};
          }
          return std::pair<std::size_t, std::size_t>{static_cast<std::size_t>(p) * op.count, op.count};
        },
        t, eb);
    if (moved.ok()) moved = order(queue, g_->stream);
    if (!moved.ok()) {
      dm->deallocate(parts);
      return moved.error();
    }
    std::vector<const void*> srcs(static_cast<std::size_t>(n));
    for (int p = 0; p < n; ++p) srcs[static_cast<std::size_t>(p)] = static_cast<const char*>(parts) + p * own * eb;
    void* out = static_cast<char*>(op.recv) + mb * eb;
    if (own > 0) dm->reduce_ordered(op.elem, op.reduce, srcs.data(), n, out, own);
    dm->deallocate(parts);  // ordered after the reduction on the same queue
    if (!all) return queue;
    // Gather the reduced chunks: every rank's own chunk to every other rank.
    HERD_RETURN_IF_ERROR(order(g_->stream, queue));
    HERD_NCCL_TRY(ncclGroupStart(), me);
    for (int p = 0; p < n; ++p) {
      if (p == rank()) continue;
      const auto [b, e] = chunk_range(op.count, n, p);
      if (own > 0) HERD_NCCL_TRY(ncclSend(out, own, t, p, g_->comm, g_->stream), me);
      if (e > b) HERD_NCCL_TRY(ncclRecv(static_cast<char*>(op.recv) + b * eb, e - b, t, p, g_->comm, g_->stream), me);
    }
    HERD_NCCL_TRY(ncclGroupEnd(), me);
    return g_->stream;
  }

  Result<std::shared_ptr<Work>> enqueue(const OpDesc& op) {
    const int me = global_rank();
    const std::string what = std::string(op_name(op.kind)) + " #" + std::to_string(op.seq) + " on " + describe();
    const bool reduces = op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduceScatter;
    if (g_->comm == nullptr) return make_error(what, ": the NCCL communicator was aborted after a timeout");
    HERD_CUDA_TRY(cudaSetDevice(g_->device), me);
    const ncclDataType_t t = nccl_type(op.elem);
    cudaStream_t s = g_->stream;
    // The rank's kernels that write the send buffer (or last read the receive buffer) run first.
    if (memory() != nullptr && memory()->queue() != nullptr) {
      HERD_RETURN_IF_ERROR(order(s, static_cast<cudaStream_t>(memory()->queue())));
    }
    if (reduces && options().deterministic) {
      HERD_ASSIGN_OR_RETURN(s, deterministic_reduce(op));
      return complete_on(s, op, what);
    }
    switch (op.kind) {
      case OpKind::kAllReduce:
        HERD_NCCL_TRY(ncclAllReduce(op.send, op.recv, op.count, t, nccl_op(op.reduce), g_->comm, s), me);
        break;
      case OpKind::kAllGather: HERD_NCCL_TRY(ncclAllGather(op.send, op.recv, op.count, t, g_->comm, s), me); break;
      case OpKind::kReduceScatter:
        HERD_NCCL_TRY(ncclReduceScatter(op.send, op.recv, op.count, t, nccl_op(op.reduce), g_->comm, s), me);
        break;
      case OpKind::kBroadcast:
        HERD_NCCL_TRY(ncclBroadcast(op.send, op.recv, op.count, t, op.peer, g_->comm, s), me);
        break;
      case OpKind::kSend: HERD_NCCL_TRY(ncclSend(op.send, op.count, t, op.peer, g_->comm, s), me); break;
      case OpKind::kRecv: HERD_NCCL_TRY(ncclRecv(op.recv, op.count, t, op.peer, g_->comm, s), me); break;
      case OpKind::kBarrier:
        HERD_NCCL_TRY(ncclAllReduce(g_->barrier_buf, g_->barrier_buf, 1, ncclInt32, ncclSum, g_->comm, s), me);
        break;
    }
    return complete_on(s, op, what);
  }

  // The op's handle: a CUDA event recorded on `s` after its last piece of work.
  Result<std::shared_ptr<Work>> complete_on(cudaStream_t s, const OpDesc& op, const std::string& what) {
    const int me = global_rank();
    cudaEvent_t ev = nullptr;
    HERD_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), me);
    HERD_CUDA_TRY(cudaEventRecord(ev, s), me);
    recorder().set_state(op.record_id, OpState::kStarted);
    return std::shared_ptr<Work>(std::make_shared<NcclWork>(g_, ev, what, op.record_id, &recorder(), options(), me));
  }

  std::shared_ptr<NcclGroup> g_;
};

}  // namespace

bool gpu_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

Result<std::unique_ptr<Communicator>> make_communicator(Communicator& bootstrap, int device,
                                                        const CommOptions& options) {
  HERD_ASSIGN_OR_RETURN(std::shared_ptr<NcclGroup> g, init_group(bootstrap, device));
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(g), options));
}

}  // namespace herd::comm::nccl
