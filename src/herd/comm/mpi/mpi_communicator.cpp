// The MPI backend: process runtime, groups, and the stage machine of each op (see mpi_communicator.h).
#include "herd/comm/mpi/mpi_communicator.h"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "herd/comm/direct.h"
#include "herd/core/format.h"
#include "herd/core/launch_env.h"
#include "herd/core/log.h"

namespace herd::comm::mpi {
namespace {

[[noreturn]] void mpi_failed(const char* call, int rc, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "herd: %s failed on rank %d (host %s) at %s:%d: %s\n", call, rank, this_host().c_str(), file,
               line, msg);
  abort_job(2);
  std::abort();
}

// Every MPI call goes through this: a failure names the call, the rank and the host, then aborts the job.
#define HERD_MPI_CHECK(call)                                                              \
  do {                                                                                    \
    const int herd_mpi_rc_ = (call);                                                      \
    if (herd_mpi_rc_ != MPI_SUCCESS) mpi_failed(#call, herd_mpi_rc_, __FILE__, __LINE__); \
  } while (0)

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kBF16: return MPI_UINT16_T;  // moved, never reduced
    case DType::kF16: return MPI_UINT16_T;
    case DType::kFP8: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_SUM;
}

class MpiWork;

// Process-wide state: MPI's lifetime, the flight recorder and the pending ops of every group.
struct Runtime {
  bool we_initialized = false;
  int world_rank = 0;
  int world_size = 1;
  int tag_ub = 32767;
  std::string host;
  std::shared_ptr<FlightRecorder> recorder;
  std::vector<std::shared_ptr<MpiWork>> pending;  // posting order
  ~Runtime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (we_initialized && !finalized) MPI_Finalize();
  }
};
std::weak_ptr<Runtime> g_runtime;

// One group: its members and its two communicators (herd's collective traffic, user send/recv).
struct Group {
  std::shared_ptr<Runtime> rt;
  std::string name;
  std::int64_t id = 0;
  std::vector<int> members;
  MPI_Comm coll = MPI_COMM_NULL;
  MPI_Comm p2p = MPI_COMM_NULL;
  ~Group() {
    if (coll != MPI_COMM_NULL) MPI_Comm_free(&coll);
    if (p2p != MPI_COMM_NULL) MPI_Comm_free(&p2p);
  }
};

std::int64_t group_hash(const std::string& name, const std::vector<int>& members) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: the same id on every member, no communication
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (char c : name) mix(static_cast<unsigned char>(c));
  for (int r : members) mix(static_cast<std::uint64_t>(r) + 0x9e37);
  return static_cast<std::int64_t>(h & 0x7fffffffffffffffull);
}

void progress_all(Runtime& rt);

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<Group> g, const OpDesc& op, const CommOptions& o, int grank)
      : g_(std::move(g)), op_(op), opts_(o), grank_(grank), n_(static_cast<int>(g_->members.size())) {}

  void start() {
    g_->rt->recorder->set_state(op_.record_id, OpState::kStarted);
    if (opts_.deterministic && is_collective(op_.kind)) {
      direct_.emplace(op_, grank_, n_);
      post_stage();
    } else if (!is_collective(op_.kind)) {
      post_stage();
    } else {
      post_native();
    }
  }

  // Non-blocking: true when the op moved to a new stage or finished.
  bool advance() {
    if (done_) return false;
    int flag = 0;
    MPI_Status st;
    if (op_.kind == OpKind::kRecv && reqs_.size() == 1) {
      HERD_MPI_CHECK(MPI_Test(&reqs_[0], &flag, &st));
    } else {
      HERD_MPI_CHECK(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    }
    if (!flag) return false;
    reqs_.clear();
    peers_.clear();
    is_recv_.clear();
    if (op_.kind == OpKind::kRecv) {
      int got = 0;
      HERD_MPI_CHECK(MPI_Get_count(&st, mpi_type(op_.elem), &got));
      if (static_cast<std::size_t>(got) != op_.count) {
        finish(make_error(describe(), ": received ", got, " elements, expected ", op_.count), OpState::kFailed);
        return true;
      }
    }
    stage_done();
    return true;
  }

  bool done() const { return done_; }
  const Group* group() const { return g_.get(); }
  bool test() override {
    progress_all(*g_->rt);
    return done_;
  }

  Status wait() override {
    const auto t0 = std::chrono::steady_clock::now();
    const auto deadline =
        t0 + std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(opts_.timeout_s));
    for (long polls = 0; !done_; ++polls) {
      progress_all(*g_->rt);
      if (done_) break;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) on_timeout();
      // Back off: spin briefly, then yield the core (oversubscribed ranks), then sleep.
      if (now - t0 > std::chrono::milliseconds(20)) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      } else if (polls > 64) {
        sched_yield();
      }
    }
    return status_;
  }

 private:
  std::size_t eb() const { return dtype_bytes(op_.elem); }
  int tag() const { return static_cast<int>((op_.seq % 8192) * 2 + (direct_ ? direct_->stage() : 0)); }
  const char* cptr(const void* p, std::size_t elems) const { return static_cast<const char*>(p) + elems * eb(); }

  void isend(const void* buf, std::size_t count, int peer, MPI_Comm comm, int tag) {
    reqs_.emplace_back();
    HERD_MPI_CHECK(MPI_Isend(buf, static_cast<int>(count), mpi_type(op_.elem), peer, tag, comm, &reqs_.back()));
    peers_.push_back(peer), is_recv_.push_back(false);
  }
  void irecv(void* buf, std::size_t count, int peer, MPI_Comm comm, int tag) {
    reqs_.emplace_back();
    HERD_MPI_CHECK(MPI_Irecv(buf, static_cast<int>(count), mpi_type(op_.elem), peer, tag, comm, &reqs_.back()));
    peers_.push_back(peer), is_recv_.push_back(true);
  }

  // Posts the requests of the current stage: the op itself for send and recv, else the messages of
  // herd's direct algorithm (comm/direct.h).
  void post_stage() {
    switch (op_.kind) {
      case OpKind::kSend: isend(op_.send, op_.count, op_.peer, g_->p2p, op_.tag); return;
      case OpKind::kRecv: irecv(op_.recv, op_.count, op_.peer, g_->p2p, op_.tag); return;
      default: break;
    }
    const int t = tag();
    for (const Transfer& x : direct_->transfers()) {
      if (x.recv) {
        irecv(x.into, x.count, x.peer, g_->coll, t);
      } else {
        isend(x.send, x.count, x.peer, g_->coll, t);
      }
    }
  }

  void stage_done() {
    if (direct_ && !direct_->finish_stage()) {
      post_stage();
      return;
    }
    if (!direct_ && op_.kind == OpKind::kReduceScatter && !scratch_.empty()) {
      std::memcpy(op_.recv, scratch_.data(), op_.count * eb());
    }
    finish(Status::Ok(), OpState::kCompleted);
  }

  // MPI's own collectives (non-deterministic mode).
  void post_native() {
    const MPI_Comm c = g_->coll;
    const MPI_Datatype t = mpi_type(op_.elem);
    const int cnt = static_cast<int>(op_.count);
    reqs_.emplace_back();
    peers_.push_back(-1), is_recv_.push_back(true);
    MPI_Request* r = &reqs_.back();
    switch (op_.kind) {
      case OpKind::kAllReduce:
        HERD_MPI_CHECK(
            MPI_Iallreduce(op_.send == op_.recv ? MPI_IN_PLACE : op_.send, op_.recv, cnt, t, mpi_op(op_.reduce), c, r));
        return;
      case OpKind::kAllGather:
        HERD_MPI_CHECK(MPI_Iallgather(cptr(op_.recv, grank_ * op_.count) == op_.send ? MPI_IN_PLACE : op_.send, cnt, t,
                                      op_.recv, cnt, t, c, r));
        return;
      case OpKind::kReduceScatter: {
        // MPI's in-place form differs from herd's (recv == send + rank * count): stage through scratch.
        const bool overlap = static_cast<const char*>(op_.recv) >= static_cast<const char*>(op_.send) &&
                             static_cast<const char*>(op_.recv) < cptr(op_.send, n_ * op_.count);
        void* out = op_.recv;
        if (overlap) {
          scratch_.resize(op_.count * eb());
          out = scratch_.data();
        }
        HERD_MPI_CHECK(MPI_Ireduce_scatter_block(op_.send, out, cnt, t, mpi_op(op_.reduce), c, r));
        return;
      }
      case OpKind::kBroadcast: HERD_MPI_CHECK(MPI_Ibcast(op_.recv, cnt, t, op_.peer, c, r)); return;
      case OpKind::kBarrier: HERD_MPI_CHECK(MPI_Ibarrier(c, r)); return;
      default: HERD_CHECK(false, "no native MPI collective for ", op_name(op_.kind));
    }
  }

  void finish(Status s, OpState state) {
    done_ = true;
    status_ = std::move(s);
    g_->rt->recorder->set_state(op_.record_id, state);
  }

  std::string describe() const { return describe_op(op_, g_->name, g_->members); }

  [[noreturn]] void on_timeout() {
    std::vector<int> no_data, not_taken;
    for (std::size_t i = 0; i < reqs_.size(); ++i) {
      int flag = 0;
      HERD_MPI_CHECK(MPI_Test(&reqs_[i], &flag, MPI_STATUS_IGNORE));
      if (flag || peers_[i] < 0) continue;
      (is_recv_[i] ? no_data : not_taken).push_back(g_->members[peers_[i]]);
    }
    std::string who;
    if (!opts_.deterministic && is_collective(op_.kind)) {
      who =
          "MPI's native collective does not say which rank is missing; compare every rank's flight recorder "
          "(or rerun with --comm.deterministic=true)";
    } else {
      if (!no_data.empty()) who += "no data from global ranks " + rank_list(no_data);
      if (!not_taken.empty())
        who += (who.empty() ? "" : "; ") + std::string("global ranks ") + rank_list(not_taken) +
               " had not received this rank's data";
      if (who.empty()) who = "every request completed but the op did not advance";
      if (op_.kind == OpKind::kAllReduce && direct_) who += " (step " + std::to_string(direct_->stage() + 1) + " of 2)";
    }
    g_->rt->recorder->set_state(op_.record_id, OpState::kTimedOut);
    const std::string reason = "timeout after " + format_seconds(opts_.timeout_s) + " on global rank " +
                               std::to_string(g_->rt->world_rank) + " (host " + g_->rt->host + "): " + describe() +
                               ": " + who;
    Result<std::string> path =
        g_->rt->recorder->dump(opts_.dump_dir, opts_.job_id.empty() ? "mpi" : opts_.job_id, reason);
    log_line(LogLevel::kError, "herd comm: " + reason +
                                   "; flight recorder: " + (path.ok() ? *path : path.error().message()) +
                                   "; aborting the job (MPI collectives cannot be cancelled)");
    abort_job(3);
    std::abort();
  }

  std::shared_ptr<Group> g_;
  OpDesc op_;
  CommOptions opts_;
  int grank_;
  int n_;
  std::optional<DirectCollective> direct_;  // herd's algorithm of a collective in deterministic mode
  bool done_ = false;
  Status status_;
  std::vector<MPI_Request> reqs_;
  std::vector<int> peers_;  // group rank of each request (-1: a native collective)
  std::vector<bool> is_recv_;
  std::vector<char> scratch_;
};

void progress_all(Runtime& rt) {
  for (std::size_t i = 0; i < rt.pending.size(); ++i) {
    while (rt.pending[i]->advance()) {
    }
  }
  std::erase_if(rt.pending, [](const std::shared_ptr<MpiWork>& w) { return w->done(); });
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<Group> g, const CommOptions& o)
      : Communicator(Identity{g->name, g->id, g->members, g->rt->world_rank}, g->rt->recorder, o), g_(std::move(g)) {}

  // Ops still pending on this group finish first: they hold the group's MPI communicators.
  ~MpiCommunicator() override {
    std::vector<std::shared_ptr<MpiWork>> mine;
    for (auto& w : g_->rt->pending) {
      if (w->group() == g_.get()) mine.push_back(w);
    }
    for (auto& w : mine) (void)w->wait();
  }

  const char* backend() const override { return "mpi"; }

  Result<std::unique_ptr<Communicator>> new_group(const std::vector<std::int64_t>& global_ranks,
                                                  const std::string& name) override {
    HERD_RETURN_IF_ERROR(check_group_ranks(global_ranks, name));
    auto g = std::make_shared<Group>();
    g->rt = g_->rt;
    g->name = name;
    g->members.assign(global_ranks.begin(), global_ranks.end());
    g->id = group_hash(name, g->members);
    MPI_Group world_group, sub;
    HERD_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    HERD_MPI_CHECK(MPI_Group_incl(world_group, static_cast<int>(g->members.size()), g->members.data(), &sub));
    HERD_MPI_CHECK(MPI_Comm_create_group(g_->coll, sub, /*tag=*/4242, &g->coll));
    HERD_MPI_CHECK(MPI_Group_free(&sub));
    HERD_MPI_CHECK(MPI_Group_free(&world_group));
    HERD_MPI_CHECK(MPI_Comm_dup(g->coll, &g->p2p));
    HERD_MPI_CHECK(MPI_Comm_set_errhandler(g->coll, MPI_ERRORS_RETURN));
    HERD_MPI_CHECK(MPI_Comm_set_errhandler(g->p2p, MPI_ERRORS_RETURN));
    int r = -1;
    HERD_MPI_CHECK(MPI_Comm_rank(g->coll, &r));
    HERD_CHECK(g->members[r] == g_->rt->world_rank, "MPI group rank order differs from the member list");
    return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(g), options()));
  }

 protected:
  std::shared_ptr<Work> post(const OpDesc& op) override {
    if (op.count > static_cast<std::size_t>(INT_MAX) / static_cast<std::size_t>(size())) {
      g_->rt->recorder->set_state(op.record_id, OpState::kFailed);
      return std::make_shared<FailedWork>(make_error(op_name(op.kind), " of ", op.count, " elements on ", describe(),
                                                     ": over MPI's int count; split the buffer"));
    }
    if (!is_collective(op.kind) && op.tag > g_->rt->tag_ub) {
      g_->rt->recorder->set_state(op.record_id, OpState::kFailed);
      return std::make_shared<FailedWork>(make_error("tag ", op.tag, " is over MPI_TAG_UB (", g_->rt->tag_ub, ")"));
    }
    auto w = std::make_shared<MpiWork>(g_, op, options(), rank());
    w->start();
    g_->rt->pending.push_back(w);
    return w;
  }

 private:
  std::shared_ptr<Group> g_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_world(const CommOptions& options) {
  std::shared_ptr<Runtime> rt = g_runtime.lock();
  if (!rt) {
    rt = std::make_shared<Runtime>();
    int initialized = 0;
    HERD_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      int provided = 0;
      HERD_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
      rt->we_initialized = true;
    }
    HERD_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rt->world_rank));
    HERD_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &rt->world_size));
    void* ub = nullptr;
    int flag = 0;
    HERD_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    if (flag) rt->tag_ub = *static_cast<int*>(ub);
    rt->host = this_host();
    rt->recorder = std::make_shared<FlightRecorder>(rt->world_rank, options.recorder_capacity);
    g_runtime = rt;
    set_log_rank(rt->world_rank);
  }
  auto g = std::make_shared<Group>();
  g->rt = rt;
  g->name = "world";
  g->id = 0;
  for (int r = 0; r < rt->world_size; ++r) g->members.push_back(r);
  HERD_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g->coll));
  HERD_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g->p2p));
  HERD_MPI_CHECK(MPI_Comm_set_errhandler(g->coll, MPI_ERRORS_RETURN));
  HERD_MPI_CHECK(MPI_Comm_set_errhandler(g->p2p, MPI_ERRORS_RETURN));
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(g), options));
}

void abort_job(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace herd::comm::mpi
