// Ring buffer of communication calls per rank and its JSON dump (see flight_recorder.h).
#include "herd/comm/flight_recorder.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "herd/core/file_write.h"
#include "herd/core/json_text.h"
#include "herd/core/launch_env.h"

namespace herd::comm {

const char* op_state_name(OpState s) {
  switch (s) {
    case OpState::kScheduled: return "scheduled";
    case OpState::kStarted: return "started";
    case OpState::kCompleted: return "completed";
    case OpState::kFailed: return "failed";
    case OpState::kTimedOut: return "timed_out";
  }
  return "?";
}

FlightRecorder::FlightRecorder(int rank, std::size_t capacity)
    : rank_(rank),
      capacity_(capacity),
      t0_(std::chrono::steady_clock::now()),
      wall_t0_ms_(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count()) {
  HERD_CHECK(capacity >= 1, "flight recorder capacity must be positive");
  ring_.reserve(capacity);
}

double FlightRecorder::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

namespace {
std::int64_t since_ns(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void FlightRecorder::beat(const std::string& what) {
  last_beat_ns_.store(since_ns(t0_), std::memory_order_relaxed);
  if (what.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  activity_ = what;
}

double FlightRecorder::idle_seconds() const {
  return static_cast<double>(since_ns(t0_) - last_beat_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

std::string FlightRecorder::last_activity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return activity_;
}

void FlightRecorder::note_step(const StepTimes& t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (steps_.size() == kStepsKept) steps_.erase(steps_.begin());
  steps_.push_back(t);
}

std::vector<FlightRecorder::StepTimes> FlightRecorder::steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_;
}

std::uint64_t FlightRecorder::record(RecordEntry e) {
  last_beat_ns_.store(since_ns(t0_), std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  e.id = next_id_++;
  e.t_post = now();
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(e));
  } else {
    ring_[e.id % capacity_] = std::move(e);
  }
  return next_id_ - 1;
}

void FlightRecorder::set_state(std::uint64_t id, OpState state) {
  last_beat_ns_.store(since_ns(t0_), std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= next_id_ || next_id_ - id > capacity_) return;
  RecordEntry& e = ring_[id % capacity_];
  e.state = state;
  if (state == OpState::kStarted) {
    e.t_start = now();
  } else if (state != OpState::kScheduled) {
    e.t_end = now();
  }
}

std::vector<RecordEntry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RecordEntry> out;
  out.reserve(ring_.size());
  const std::uint64_t first = next_id_ > capacity_ ? next_id_ - capacity_ : 0;
  for (std::uint64_t id = first; id < next_id_; ++id) out.push_back(ring_[id % capacity_]);
  return out;
}

std::uint64_t FlightRecorder::total_recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_id_;
}

void FlightRecorder::note_group(std::int64_t group_id, const std::string& name, const std::vector<int>& members) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const GroupInfo& g : groups_) {
    if (g.group_id == group_id) return;
  }
  groups_.push_back(GroupInfo{group_id, name, members});
}

std::vector<GroupInfo> FlightRecorder::groups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return groups_;
}

Json FlightRecorder::to_json(const std::string& reason) const {
  Json j;
  j["rank"] = rank_;
  j["host"] = this_host();
  j["pid"] = static_cast<std::int64_t>(getpid());
  j["reason"] = reason;
  j["wall_clock_at_creation_ms"] = wall_t0_ms_;
  j["time_now_s"] = now();
  j["idle_s"] = idle_seconds();
  j["activity"] = last_activity();
  j["total_recorded"] = total_recorded();
  j["capacity"] = static_cast<std::uint64_t>(capacity_);
  Json groups = Json::array();
  for (const GroupInfo& g : this->groups()) {
    Json x;
    x["group_id"] = g.group_id;
    x["name"] = g.name;
    x["members"] = g.members;
    groups.push_back(std::move(x));
  }
  j["groups"] = std::move(groups);
  Json steps = Json::array();
  for (const StepTimes& t : this->steps())
    steps.push_back(Json{{"step", t.step},
                         {"busy_s", t.busy_s},
                         {"wait_s", t.wait_s},
                         {"stall_s", t.stall_s},
                         {"queued_s", t.queued_s}});
  j["steps"] = std::move(steps);
  Json list = Json::array();
  for (const RecordEntry& e : entries()) {
    Json x;
    x["id"] = e.id;
    x["seq"] = e.seq;
    x["group"] = e.group;
    x["group_id"] = e.group_id;
    x["op"] = op_name(e.op);
    x["dtype"] = dtype_name(e.elem);
    x["count"] = e.count;
    if (e.op == OpKind::kAllReduce || e.op == OpKind::kReduceScatter) x["reduce"] = reduce_name(e.reduce);
    if (e.peer >= 0) x["peer"] = e.peer;
    if (e.tag >= 0) x["tag"] = e.tag;
    x["t_post"] = e.t_post;
    x["t_start"] = e.t_start;
    x["t_end"] = e.t_end;
    x["state"] = op_state_name(e.state);
    list.push_back(std::move(x));
  }
  j["entries"] = std::move(list);
  return j;
}

Result<std::string> FlightRecorder::dump(const std::string& dir, const std::string& tag,
                                         const std::string& reason) const {
  std::error_code ec;
  const std::filesystem::path base =
      dir.empty() ? std::filesystem::temp_directory_path(ec) : std::filesystem::path(dir);
  std::filesystem::create_directories(base, ec);
  const std::filesystem::path path = base / ("herd_flight_" + tag + "_rank" + std::to_string(rank_) + ".json");
  const std::filesystem::path tmp = path.string() + ".tmp" + std::to_string(static_cast<long>(getpid()));
  {
    std::ofstream out(tmp);
    if (!out) {
      return make_error("flight recorder: cannot write ", path.string(),
                        "; set diagnostics.dir to a writable directory");
    }
    out << json_text(to_json(reason), 1) << "\n";
    if (Status s = close_written(out, tmp.string()); !s.ok()) {
      std::filesystem::remove(tmp, ec);
      return make_error("flight recorder: ", s.error().message(), "; set diagnostics.dir to a writable directory");
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error("flight recorder: cannot rename ", tmp.string(), " to ", path.string(), ": ", ec.message());
  return path.string();
}

}  // namespace herd::comm
