// LocalWorld and LocalCommunicator: group registry, posting, teardown and the abort path.
#include "herd/comm/local/local_world.h"

#include <unistd.h>

#include <atomic>
#include <exception>
#include <thread>

#include "herd/comm/device_memory.h"
#include "herd/comm/local/local_state.h"
#include "herd/core/exception.h"
#include "herd/core/log.h"

namespace herd::comm {
namespace local_detail {
namespace {
std::atomic<int> g_world_counter{0};
}  // namespace

WorldState::WorldState(int n, CommOptions o) : size(n), opts(std::move(o)) {
  tag = opts.job_id.empty() ? std::to_string(static_cast<long>(getpid())) + "_w" + std::to_string(g_world_counter++)
                            : opts.job_id;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(std::make_unique<RankState>());
    ranks.back()->recorder = std::make_shared<FlightRecorder>(r, opts.recorder_capacity);
  }
  world_group = std::make_shared<GroupState>();
  world_group->id = 0;
  world_group->name = "world";
  for (int r = 0; r < n; ++r) world_group->members.push_back(r);
}

void WorldState::notify(const std::vector<int>& global_ranks) {
  for (int r : global_ranks) ranks[r]->cv.notify_one();
}

void WorldState::notify_all() {
  for (auto& r : ranks) r->cv.notify_one();
}

void WorldState::abort_locked(const std::string& reason) {
  if (aborted) return;
  aborted = true;
  std::string files;
  for (auto& r : ranks) {
    Result<std::string> path = r->recorder->dump(opts.dump_dir, tag, reason);
    if (path.ok()) {
      dump_paths.push_back(*path);
      if (files.empty()) files = *path;
    } else {
      log_warning(path.error().message());
    }
  }
  abort_reason = reason + (files.empty() ? "" : "; flight recorders dumped to " + files + " (and the other ranks')");
  log_line(LogLevel::kError, "herd comm: " + abort_reason);
  notify_all();
}

namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<WorldState> w, std::shared_ptr<GroupState> g, int global_rank, bool root)
      : Communicator(Identity{g->name, g->id, g->members, global_rank}, w->ranks[global_rank]->recorder, w->opts),
        w_(std::move(w)),
        g_(std::move(g)),
        root_(root) {}

  ~LocalCommunicator() override {
    if (!root_) return;
    // The rank is leaving: finish what it posted, then let peers that still wait for it fail fast.
    std::vector<std::shared_ptr<LocalWork>> pending;
    {
      std::lock_guard<std::mutex> lock(w_->mu);
      pending = w_->ranks[global_rank()]->pending;
    }
    for (auto& p : pending) (void)p->wait();
    std::lock_guard<std::mutex> lock(w_->mu);
    w_->ranks[global_rank()]->exited = true;
    w_->notify_all();
  }

  const char* backend() const override { return "local"; }

  Result<std::unique_ptr<Communicator>> new_group(const std::vector<std::int64_t>& global_ranks,
                                                  const std::string& name) override {
    HERD_RETURN_IF_ERROR(check_group_ranks(global_ranks, name));
    WorldState::GroupKey key{name, std::vector<int>(global_ranks.begin(), global_ranks.end())};
    std::lock_guard<std::mutex> lock(w_->mu);
    if (w_->aborted) return make_error("new_group '", name, "': herd comm (local) aborted: ", w_->abort_reason);
    std::vector<int>& counts = w_->created[key];
    counts.resize(w_->size, 0);
    const int k = counts[global_rank()]++;
    auto& instances = w_->groups[key];
    if (static_cast<int>(instances.size()) <= k) {
      auto g = std::make_shared<GroupState>();
      g->id = w_->next_group_id++;
      g->name = name;
      g->members = key.second;
      instances.push_back(std::move(g));
    }
    return std::unique_ptr<Communicator>(new LocalCommunicator(w_, instances[k], global_rank(), false));
  }

 protected:
  std::shared_ptr<Work> post(const OpDesc& op) override {
    // Peers read this rank's device buffers from their own threads: what its queue still has to write
    // into them lands first.
    if (on_device(w_->opts, op)) w_->opts.device_memory->synchronize();
    std::unique_lock<std::mutex> lk(w_->mu);
    if (w_->aborted) {
      recorder().set_state(op.record_id, OpState::kFailed);
      return std::make_shared<FailedWork>(make_error("herd comm (local) aborted: ", w_->abort_reason));
    }
    auto work = std::make_shared<LocalWork>(w_, g_, op, rank(), &recorder());
    work->post_locked();
    w_->ranks[global_rank()]->pending.push_back(work);
    // Eager progress: the last rank to arrive can do its share now, before anyone waits.
    progress_rank(*w_, global_rank(), lk);
    return work;
  }

 private:
  std::shared_ptr<WorldState> w_;
  std::shared_ptr<GroupState> g_;
  bool root_;
};

}  // namespace
}  // namespace local_detail

LocalWorld::LocalWorld(int size, CommOptions options) {
  HERD_CHECK(size >= 1, "LocalWorld of ", size, " ranks");
  state_ = std::make_shared<local_detail::WorldState>(size, std::move(options));
}

LocalWorld::~LocalWorld() = default;

int LocalWorld::size() const { return state_->size; }

std::unique_ptr<Communicator> LocalWorld::communicator(int rank) {
  HERD_CHECK(rank >= 0 && rank < state_->size, "rank ", rank, " outside a local world of ", state_->size);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    HERD_CHECK(!state_->ranks[rank]->taken, "the world communicator of rank ", rank, " was already handed out");
    state_->ranks[rank]->taken = true;
  }
  return std::make_unique<local_detail::LocalCommunicator>(state_, state_->world_group, rank, true);
}

std::vector<Status> LocalWorld::run(const std::function<Status(Communicator&)>& fn) {
  std::vector<Status> statuses(state_->size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < state_->size; ++r) comms.push_back(communicator(r));
  std::vector<std::thread> threads;
  for (int r = 0; r < state_->size; ++r) {
    threads.emplace_back([&, r] {
      set_log_rank(r);
      // The rank's boundary (core/exception.h): whatever escapes `fn` fails this rank and aborts the world.
      try {
        statuses[r] = fn(*comms[r]);
      } catch (...) {
        const std::string what = current_exception_message();
        statuses[r] = make_error(what);
        abort("global rank " + std::to_string(r) + " failed: " + what);
      }
      comms[r].reset();
      set_log_rank(-1);
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

void LocalWorld::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->abort_locked(reason);
}

bool LocalWorld::aborted() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->aborted;
}

std::vector<std::string> LocalWorld::dump(const std::string& reason) {
  std::vector<std::string> files;
  for (auto& r : state_->ranks) {
    Result<std::string> path = r->recorder->dump(state_->opts.dump_dir, state_->tag, reason);
    if (path.ok()) {
      files.push_back(*path);
    } else {
      log_warning(path.error().message());
    }
  }
  return files;
}

std::vector<std::string> LocalWorld::dump_paths() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->dump_paths;
}

std::shared_ptr<FlightRecorder> LocalWorld::recorder(int rank) const {
  HERD_CHECK(rank >= 0 && rank < state_->size, "rank ", rank, " outside a local world of ", state_->size);
  return state_->ranks[rank]->recorder;
}

Status first_error(const std::vector<Status>& statuses) {
  for (std::size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) return make_error("rank ", r, ": ", statuses[r].error().message());
  }
  return Status::Ok();
}

}  // namespace herd::comm
