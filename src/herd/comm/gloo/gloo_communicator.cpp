// The gloo backend: start-up, groups as slot spaces on one connection, and each op's messages
// (see gloo_communicator.h).
#include "herd/comm/gloo/gloo_communicator.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <vector>

#include "herd/comm/direct.h"
#include "herd/core/format.h"
#include "herd/core/launch_env.h"
#include "herd/core/log.h"

namespace herd::comm::gloo {
namespace {

// FNV-1a over 64-bit words: the same value on every rank, no communication.
struct Hash {
  std::uint64_t h = 1469598103934665603ull;
  Hash& mix(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    return *this;
  }
  Hash& mix(const std::string& s) {
    for (char c : s) mix(static_cast<unsigned char>(c));
    return mix(s.size());
  }
};

// Process-wide state: the one connection to every peer, the flight recorder, how many groups of each
// name and member list this process has made (so two alive at once get different slots), and the
// failure that ended the connection.
struct Runtime {
  int world_rank = 0;
  int world_size = 1;
  std::string host;
  std::shared_ptr<::gloo::transport::Device> device;
  std::shared_ptr<::gloo::rendezvous::Context> context;
  std::shared_ptr<FlightRecorder> recorder;
  std::mutex mu;
  std::map<std::uint64_t, int> made;
  std::optional<Error> failure;

  std::optional<Error> failed() {
    std::lock_guard<std::mutex> lock(mu);
    return failure;
  }
  void fail(const Error& e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failure) failure = e;
  }
};
std::weak_ptr<Runtime> g_runtime;

struct Group {
  std::shared_ptr<Runtime> rt;
  std::string name;
  std::int64_t id = 0;
  std::vector<int> members;
  std::uint64_t key = 0;  // the slot space of this group
};

std::shared_ptr<Group> make_group(std::shared_ptr<Runtime> rt, const std::string& name, std::vector<int> members) {
  auto g = std::make_shared<Group>();
  Hash h;
  h.mix(name);
  for (int r : members) h.mix(static_cast<std::uint64_t>(r));
  {
    std::lock_guard<std::mutex> lock(rt->mu);
    h.mix(static_cast<std::uint64_t>(rt->made[h.h]++));
  }
  g->rt = std::move(rt);
  g->name = name;
  g->members = std::move(members);
  g->key = h.h;
  g->id = name == "world" ? 0 : static_cast<std::int64_t>(h.h & 0x7fffffffffffffffull);
  return g;
}

constexpr std::uint64_t kSlotMask = (std::uint64_t{1} << 56) - 1;

class GlooWork final : public Work {
 public:
  GlooWork(std::shared_ptr<Group> g, const OpDesc& op, const CommOptions& o, int grank)
      : g_(std::move(g)), op_(op), opts_(o), grank_(grank), n_(static_cast<int>(g_->members.size())) {}

  void start() {
    g_->rt->recorder->set_state(op_.record_id, OpState::kStarted);
    deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(opts_.timeout_s));
    if (is_collective(op_.kind)) {
      direct_.emplace(op_, grank_, n_);
      post(direct_->transfers());
    } else if (op_.kind == OpKind::kSend) {
      post({{false, op_.peer, op_.send, nullptr, op_.count}});
    } else {
      post({{true, op_.peer, nullptr, op_.recv, op_.count}});
    }
  }

  bool test() override { return done_; }

  Status wait() override {
    while (!done_) {
      if (!wait_stage()) break;
      if (direct_ && !direct_->finish_stage()) {
        post(direct_->transfers());
      } else {
        finish(Status::Ok(), OpState::kCompleted);
      }
    }
    return status_;
  }

 private:
  struct Posted {
    Transfer t;
    std::unique_ptr<::gloo::transport::UnboundBuffer> buf;
  };

  std::uint64_t slot() const {
    Hash h;
    h.mix(g_->key);
    if (is_collective(op_.kind)) {
      h.mix(0).mix(op_.seq).mix(static_cast<std::uint64_t>(direct_->stage()));
    } else {
      h.mix(1).mix(static_cast<std::uint64_t>(op_.tag));
    }
    return h.h & kSlotMask;
  }

  void post(const std::vector<Transfer>& ts) {
    posted_.clear();
    if (std::optional<Error> e = g_->rt->failed()) {
      finish(make_error(describe(), ": ", e->message()), OpState::kFailed);
      return;
    }
    const std::uint64_t s = slot();
    const std::size_t eb = dtype_bytes(op_.elem);
    tokens_.assign(ts.size(), 0);
    std::size_t i = 0;
    try {
      for (; i < ts.size(); ++i) {
        const Transfer& t = ts[i];
        // An empty message (a barrier's) still travels: one byte of this op's own.
        const std::size_t bytes = t.count * eb;
        void* p = bytes == 0 ? &tokens_[i] : (t.recv ? t.into : const_cast<void*>(t.send));
        Posted x{t, g_->rt->context->createUnboundBuffer(p, bytes == 0 ? 1 : bytes)};
        const int peer = g_->members[t.peer];
        if (t.recv) {
          x.buf->recv(peer, s);
        } else {
          x.buf->send(peer, s);
        }
        posted_.push_back(std::move(x));
      }
    } catch (const std::exception& e) {
      lost(ts[i].peer, e.what());
    }
  }

  // Waits for every message of the stage; false when the op failed.
  bool wait_stage() {
    if (done_) return false;
    for (Posted& x : posted_) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out(x.t);
        return false;
      }
      try {
        if (x.t.recv) {
          x.buf->waitRecv(left);
        } else {
          x.buf->waitSend(left);
        }
      } catch (const ::gloo::IoException& e) {
        if (std::chrono::steady_clock::now() >= deadline_) {
          timed_out(x.t);
        } else {
          lost(x.t.peer, e.what());
        }
        return false;
      } catch (const std::exception& e) {
        lost(x.t.peer, e.what());
        return false;
      }
    }
    posted_.clear();
    return true;
  }

  void timed_out(const Transfer& t) {
    const int who = g_->members[t.peer];
    std::string what = t.recv ? "no data from global rank " + std::to_string(who)
                              : "global rank " + std::to_string(who) + " had not received this rank's data";
    if (op_.kind == OpKind::kAllReduce) what += " (step " + std::to_string(direct_->stage() + 1) + " of 2)";
    const std::string reason = "timeout after " + format_seconds(opts_.timeout_s) + " on global rank " +
                               std::to_string(g_->rt->world_rank) + " (host " + g_->rt->host + "): " + describe() +
                               ": " + what;
    fail(reason, OpState::kTimedOut);
  }

  void lost(int peer, const std::string& what) {
    fail("on global rank " + std::to_string(g_->rt->world_rank) + " (host " + g_->rt->host + "): " + describe() +
             ": the connection to global rank " + std::to_string(g_->members[peer]) + " failed (" + what + ")",
         OpState::kFailed);
  }

  void fail(const std::string& reason, OpState state) {
    Result<std::string> path =
        g_->rt->recorder->dump(opts_.dump_dir, opts_.job_id.empty() ? "gloo" : opts_.job_id, reason);
    const Error e = make_error(reason, "; flight recorder: ", path.ok() ? *path : path.error().message());
    g_->rt->fail(e);
    posted_.clear();
    finish(e, state);
  }

  void finish(Status s, OpState state) {
    done_ = true;
    status_ = std::move(s);
    g_->rt->recorder->set_state(op_.record_id, state);
  }

  std::string describe() const { return describe_op(op_, g_->name, g_->members); }

  std::shared_ptr<Group> g_;
  OpDesc op_;
  CommOptions opts_;
  int grank_;
  int n_;
  std::chrono::steady_clock::time_point deadline_;
  std::optional<DirectCollective> direct_;
  std::vector<Posted> posted_;
  std::vector<char> tokens_;
  bool done_ = false;
  Status status_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<Group> g, const CommOptions& o)
      : Communicator(Identity{g->name, g->id, g->members, g->rt->world_rank}, g->rt->recorder, o), g_(std::move(g)) {}

  const char* backend() const override { return "gloo"; }

  Result<std::unique_ptr<Communicator>> new_group(const std::vector<std::int64_t>& global_ranks,
                                                  const std::string& name) override {
    HERD_RETURN_IF_ERROR(check_group_ranks(global_ranks, name));
    std::vector<int> members(global_ranks.begin(), global_ranks.end());
    return std::unique_ptr<Communicator>(new GlooCommunicator(make_group(g_->rt, name, std::move(members)), options()));
  }

 protected:
  std::shared_ptr<Work> post(const OpDesc& op) override {
    auto w = std::make_shared<GlooWork>(g_, op, options(), rank());
    w->start();
    return w;
  }

 private:
  std::shared_ptr<Group> g_;
};

Result<std::shared_ptr<Runtime>> connect(const CommOptions& options, const Rendezvous& rv) {
  auto rt = std::make_shared<Runtime>();
  rt->world_rank = rv.rank;
  rt->world_size = rv.size;
  rt->host = this_host();
  rt->recorder = std::make_shared<FlightRecorder>(rv.rank, options.recorder_capacity);
  const std::filesystem::path store_dir = std::filesystem::path(rv.dir) / rv.job_key;
  std::error_code ec;
  std::filesystem::create_directories(store_dir, ec);
  if (ec) {
    return make_error("parallel.rendezvous_dir ", rv.dir, ": cannot create ", store_dir.string(), " (", ec.message(),
                      "); choose a writable directory that every host of the job sees");
  }
  try {
    ::gloo::transport::tcp::attr attr;
    attr.iface = rv.iface;
    rt->device = ::gloo::transport::tcp::CreateDevice(attr);
    ::gloo::rendezvous::FileStore store(store_dir.string());
    rt->context = std::make_shared<::gloo::rendezvous::Context>(rv.rank, rv.size);
    rt->context->setTimeout(std::chrono::milliseconds(static_cast<std::int64_t>(options.timeout_s * 1000)));
    rt->context->connectFullMesh(store, rt->device);
  } catch (const std::exception& e) {
    return make_error("rank ", rv.rank, " of ", rv.size, " (host ", rt->host, ") could not meet its peers in ",
                      store_dir.string(), " within ", format_seconds(options.timeout_s), ": ", e.what(),
                      "; every rank must be started and see this directory (across hosts: set "
                      "parallel.rendezvous_dir to shared storage; GLOO_SOCKET_IFNAME names the network interface)");
  }
  set_log_rank(rv.rank);
  return rt;
}

}  // namespace

Result<std::unique_ptr<Communicator>> make_world(const CommOptions& options, const Rendezvous& rv) {
  std::shared_ptr<Runtime> rt = g_runtime.lock();
  const bool fresh = !rt;
  if (fresh) {
    HERD_ASSIGN_OR_RETURN(rt, connect(options, rv));
    g_runtime = rt;
  }
  std::vector<int> members;
  for (int r = 0; r < rt->world_size; ++r) members.push_back(r);
  auto world = std::unique_ptr<Communicator>(new GlooCommunicator(make_group(rt, "world", members), options));
  if (fresh) {
    // Every rank is connected once this returns: the meeting directory is no longer needed.
    HERD_RETURN_IF_ERROR(world->barrier());
    if (rv.rank == 0) {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::path(rv.dir) / rv.job_key, ec);
    }
  }
  return world;
}

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace herd::comm::gloo
