// One rank's progress through one op of the local backend: the stage machine of local_state.h.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "herd/comm/device_memory.h"
#include "herd/comm/local/local_state.h"
#include "herd/comm/reduce.h"
#include "herd/core/format.h"

namespace herd::comm::local_detail {
namespace {

const char* cbyte(const void* p, std::size_t off) { return static_cast<const char*>(p) + off; }
char* byte(void* p, std::size_t off) { return static_cast<char*>(p) + off; }

}  // namespace

bool on_device(const CommOptions& o, const OpDesc& op) {
  return o.device_memory != nullptr && o.device_memory->holds_either(op.send, op.recv);
}

void LocalWork::copy_bytes(void* dst, const void* src, std::size_t n) const {
  if (n == 0 || dst == src) return;
  if (device_) {
    w_->opts.device_memory->copy(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

void LocalWork::reduce(const void* const* srcs, int n, void* dst, std::size_t count) const {
  if (device_) {
    w_->opts.device_memory->reduce_ordered(op_.elem, op_.reduce, srcs, n, dst, count);
  } else {
    reduce_ordered(op_.elem, op_.reduce, srcs, n, dst, count);
  }
}

void LocalWork::device_done() const {
  if (device_) w_->opts.device_memory->synchronize();
}

LocalWork::LocalWork(std::shared_ptr<WorldState> w, std::shared_ptr<GroupState> g, const OpDesc& op, int group_rank,
                     FlightRecorder* recorder)
    : w_(std::move(w)), g_(std::move(g)), op_(op), grank_(group_rank), recorder_(recorder) {
  global_ = g_->members[grank_];
  device_ = on_device(w_->opts, op_);
}

int LocalWork::work_phases() const {
  switch (op_.kind) {
    case OpKind::kAllReduce: return 2;
    case OpKind::kBarrier: return 0;
    default: return 1;
  }
}

std::string LocalWork::describe_op() const {
  std::string s = std::string(op_name(op_.kind)) + " #" + std::to_string(op_.seq) + " on group '" + g_->name +
                  "' (global ranks " + rank_list(g_->members) + ")";
  if (op_.kind != OpKind::kBarrier) s += ", " + std::string(dtype_name(op_.elem)) + " x " + std::to_string(op_.count);
  if (!is_collective(op_.kind)) {
    s += std::string(op_.kind == OpKind::kSend ? " to" : " from") + " global rank " +
         std::to_string(g_->members[op_.peer]) + " tag " + std::to_string(op_.tag);
  }
  return s;
}

void LocalWork::finish(Status s, OpState state) {
  if (done_) return;
  done_ = true;
  status_ = std::move(s);
  recorder_->set_state(op_.record_id, timed_out_ ? OpState::kTimedOut : state);
}

void LocalWork::post_locked() {
  const int n = static_cast<int>(g_->members.size());
  if (op_.kind == OpKind::kSend) {
    msg_ = std::make_shared<P2PMsg>();
    msg_->buf = op_.send, msg_->count = op_.count, msg_->elem = op_.elem;
    g_->mail[{grank_, op_.peer, op_.tag}].push_back(msg_);
    recorder_->set_state(op_.record_id, OpState::kStarted);
    w_->notify({g_->members[op_.peer]});
    stage_ = 1;
    return;
  }
  if (op_.kind == OpKind::kRecv) {
    stage_ = 1;
    return;
  }
  Slot& s = g_->slots[op_.seq];
  if (s.arr.empty()) {
    s.arr.resize(n);
    s.stage.assign(n, 0);
  }
  Arrival a{op_.kind, op_.elem, op_.count, op_.reduce, op_.peer, op_.send, op_.recv};
  for (int j = 0; j < n; ++j) {
    const Arrival& b = s.arr[j];
    if (s.stage[j] == 0) continue;
    const bool reduces = a.kind == OpKind::kAllReduce || a.kind == OpKind::kReduceScatter;
    if (b.kind != a.kind || b.elem != a.elem || b.count != a.count || (reduces && b.reduce != a.reduce) ||
        b.root != a.root) {
      auto show = [](const Arrival& x) {
        return std::string(op_name(x.kind)) + "(" + dtype_name(x.elem) + " x " + std::to_string(x.count) +
               (x.root >= 0 ? ", root " + std::to_string(x.root) : "") + ")";
      };
      w_->abort_locked("collective #" + std::to_string(op_.seq) + " on group '" + g_->name + "': global rank " +
                       std::to_string(global_) + " posted " + show(a) + " but global rank " +
                       std::to_string(g_->members[j]) + " posted " + show(b) +
                       "; every rank of a group must issue the same collectives in the same order");
      return;
    }
    break;
  }
  s.arr[grank_] = a;
  s.stage[grank_] = 1;
  s.reached[1]++;
  stage_ = 1;
  if (s.reached[1] == n) w_->notify(g_->members);
}

void LocalWork::run_phase(int phase, const std::vector<Arrival>& arr) {
  const int n = static_cast<int>(arr.size());
  const std::size_t eb = dtype_bytes(op_.elem);
  const Arrival& me = arr[grank_];
  std::vector<const void*> srcs(n);
  switch (op_.kind) {
    case OpKind::kAllReduce: {
      const auto [b, e] = chunk_range(op_.count, n, grank_);
      if (phase == 1) {
        for (int j = 0; j < n; ++j) srcs[j] = cbyte(arr[j].send, b * eb);
        if (e > b) reduce(srcs.data(), n, byte(me.recv, b * eb), e - b);
      } else {
        for (int j = 0; j < n; ++j) {
          if (j == grank_) continue;
          const auto [bj, ej] = chunk_range(op_.count, n, j);
          copy_bytes(byte(me.recv, bj * eb), cbyte(arr[j].recv, bj * eb), (ej - bj) * eb);
        }
      }
      return;
    }
    case OpKind::kAllGather:
      for (int j = 0; j < n; ++j) copy_bytes(byte(me.recv, j * op_.count * eb), arr[j].send, op_.count * eb);
      return;
    case OpKind::kReduceScatter:
      for (int j = 0; j < n; ++j) srcs[j] = cbyte(arr[j].send, grank_ * op_.count * eb);
      if (op_.count > 0) reduce(srcs.data(), n, me.recv, op_.count);
      return;
    case OpKind::kBroadcast:
      if (grank_ != op_.peer) copy_bytes(me.recv, arr[op_.peer].recv, op_.count * eb);
      return;
    default: HERD_CHECK(false, "no work phase for ", op_name(op_.kind));
  }
}

bool LocalWork::step_collective(std::unique_lock<std::mutex>& lk) {
  const int n = static_cast<int>(g_->members.size());
  auto it = g_->slots.find(op_.seq);
  HERD_CHECK(it != g_->slots.end(), "slot of ", describe_op(), " vanished");
  Slot& s = it->second;
  if (s.reached[stage_] < n) return false;
  const int phases = work_phases();
  if (stage_ <= phases) {
    if (stage_ == 1) recorder_->set_state(op_.record_id, OpState::kStarted);
    const std::vector<Arrival> arr = s.arr;  // the slot may be touched by others while unlocked
    const int phase = stage_;
    w_->active++;
    lk.unlock();
    run_phase(phase, arr);
    device_done();  // peers read what this phase wrote once the stage advances
    lk.lock();
    if (--w_->active == 0 && w_->aborted) w_->notify_all();
    if (w_->aborted) return true;
    // `it` stays valid: a slot is erased only after every member departed, and this one has not.
    stage_++;
    s.stage[grank_] = stage_;
    if (++s.reached[stage_] == n) w_->notify(g_->members);
    return true;
  }
  if (++s.departed == n) g_->slots.erase(it);
  finish(Status::Ok(), OpState::kCompleted);
  return true;
}

bool LocalWork::step_recv(std::unique_lock<std::mutex>& lk) {
  auto box = g_->mail.find({op_.peer, grank_, op_.tag});
  if (box == g_->mail.end() || box->second.empty()) return false;
  std::shared_ptr<P2PMsg> m = box->second.front();
  box->second.pop_front();
  if (box->second.empty()) g_->mail.erase(box);
  const int sender = g_->members[op_.peer];
  if (m->count != op_.count || m->elem != op_.elem) {
    const std::string err = "send/recv mismatch on group '" + g_->name + "' tag " + std::to_string(op_.tag) +
                            ": global rank " + std::to_string(sender) + " sent " + dtype_name(m->elem) + " x " +
                            std::to_string(m->count) + ", global rank " + std::to_string(global_) + " expected " +
                            dtype_name(op_.elem) + " x " + std::to_string(op_.count);
    m->error = err;
    m->done = true;
    w_->notify({sender});
    finish(make_error(err), OpState::kFailed);
    return true;
  }
  recorder_->set_state(op_.record_id, OpState::kStarted);
  w_->active++;
  lk.unlock();
  copy_bytes(op_.recv, m->buf, op_.count * dtype_bytes(op_.elem));
  device_done();
  lk.lock();
  if (--w_->active == 0 && w_->aborted) w_->notify_all();
  m->done = true;
  w_->notify({sender});
  finish(Status::Ok(), OpState::kCompleted);
  return true;
}

bool LocalWork::step(std::unique_lock<std::mutex>& lk) {
  if (done_ || w_->aborted) return false;
  switch (op_.kind) {
    case OpKind::kSend:
      if (!msg_->done) return false;
      if (msg_->error.empty()) {
        finish(Status::Ok(), OpState::kCompleted);
      } else {
        finish(make_error(msg_->error), OpState::kFailed);
      }
      return true;
    case OpKind::kRecv: return step_recv(lk);
    default: return step_collective(lk);
  }
}

std::vector<int> LocalWork::missing(std::string* what) const {
  std::vector<int> out;
  if (op_.kind == OpKind::kSend) {
    out.push_back(g_->members[op_.peer]);
    *what = "had not posted the matching recv";
  } else if (op_.kind == OpKind::kRecv) {
    out.push_back(g_->members[op_.peer]);
    *what = "had not posted the matching send";
  } else {
    auto it = g_->slots.find(op_.seq);
    if (it == g_->slots.end()) return out;
    for (std::size_t j = 0; j < g_->members.size(); ++j) {
      if (it->second.stage[j] < stage_) out.push_back(g_->members[j]);
    }
    *what = stage_ <= 1 ? "had not joined it"
                        : "had joined it but not progressed it (they are busy or stalled outside the communicator)";
  }
  return out;
}

bool LocalWork::test() {
  std::unique_lock<std::mutex> lk(w_->mu);
  if (!done_ && w_->aborted) fail_pending(*w_, global_, lk);
  if (!done_) progress_rank(*w_, global_, lk);
  return done_;
}

Status LocalWork::wait() {
  std::unique_lock<std::mutex> lk(w_->mu);
  const auto timeout = std::chrono::duration<double>(w_->opts.timeout_s);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(timeout);
  while (!done_) {
    if (w_->aborted) {
      fail_pending(*w_, global_, lk);
      continue;
    }
    if (progress_rank(*w_, global_, lk)) continue;
    std::string what;
    const std::vector<int> gone = missing(&what);
    std::vector<int> exited;
    for (int r : gone) {
      if (w_->ranks[r]->exited) exited.push_back(r);
    }
    if (!exited.empty()) {
      w_->abort_locked(describe_op() + ": global ranks " + rank_list(exited) +
                       " exited without completing it (seen by global rank " + std::to_string(global_) + ")");
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out_ = true;
      recorder_->set_state(op_.record_id, OpState::kTimedOut);  // before the dump in abort_locked
      w_->abort_locked("timeout after " + format_seconds(w_->opts.timeout_s) + " on global rank " +
                       std::to_string(global_) + ": " + describe_op() + ": global ranks " + rank_list(gone) + " " +
                       what);
      continue;
    }
    w_->ranks[global_]->cv.wait_until(lk, deadline);
  }
  return status_;
}

bool progress_rank(WorldState& w, int global_rank, std::unique_lock<std::mutex>& lk) {
  auto& pending = w.ranks[global_rank]->pending;
  bool progressed = false;
  // Only this rank's thread touches its pending list, so indices stay valid across unlocks.
  for (std::size_t i = 0; i < pending.size() && !w.aborted; ++i) {
    while (pending[i]->step(lk)) progressed = true;
  }
  std::erase_if(pending, [](const std::shared_ptr<LocalWork>& p) { return p->done(); });
  return progressed;
}

void fail_pending(WorldState& w, int global_rank, std::unique_lock<std::mutex>& lk) {
  auto& pending = w.ranks[global_rank]->pending;
  const Status err = make_error("herd comm (local) aborted: ", w.abort_reason);
  for (auto& p : pending) p->finish(err, OpState::kFailed);
  pending.clear();
  // Peers copying from this rank's buffers finish their current phase before it may reuse them.
  while (w.active > 0) w.ranks[global_rank]->cv.wait(lk);
}

}  // namespace herd::comm::local_detail
