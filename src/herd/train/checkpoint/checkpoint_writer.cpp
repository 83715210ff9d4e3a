// CheckpointWriter: a snapshot written by a background thread, no collectives (checkpoint_writer.h).
#include "herd/train/checkpoint/checkpoint_writer.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "herd/core/exception.h"

namespace herd::train {

namespace fs = std::filesystem;

CheckpointWriter::~CheckpointWriter() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::wait_idle() {
  if (thread_.joinable()) thread_.join();
}

Status CheckpointWriter::write(std::int64_t step, const Json& meta, const Json& layout, bool fail_disk_full) {
  const fs::path tmp = fs::path(opt_.dir) / tmp_dir_name(step);
  std::error_code ec;
  fs::create_directories(tmp, ec);  // every rank: whichever comes first makes it
  Status s = Status::Ok();
  if (ec) {
    s = make_error(tmp.string(), ": cannot create (", ec.message(), "); check checkpoint.dir");
  } else if (fail_disk_full) {
    s = make_error((tmp / "rank_00000.bin").string(), ": write failed (", std::strerror(ENOSPC),
                   ") [injected by fault.fail_checkpoint_step=", step, "]; check free disk space");
  } else {
    s = write_shard(tmp.string(), opt_.rank, snap_);
  }
  if (opt_.rank != 0) {
    if (!s.ok() && !ec) (void)publish_shard_failure(tmp.string(), opt_.rank, s);  // best effort
    return s;
  }
  if (s.ok()) {
    CommitSpec spec{opt_.dir, step, opt_.world_size, snap_.elem, meta, layout, opt_.keep, opt_.timeout_s};
    s = commit_checkpoint(spec, &cancel_);
  } else {
    // Let every other rank finish with the directory before it goes, so none writes into a removed one.
    (void)await_shard_indexes(tmp.string(), opt_.world_size, opt_.timeout_s, &cancel_, /*skip_rank=*/0);
  }
  if (!s.ok()) fs::remove_all(tmp, ec);  // nothing of a failed save stays; the previous checkpoint is untouched
  return s;
}

void CheckpointWriter::start(std::int64_t step, Json meta, Json layout, bool fail_disk_full) {
  wait_idle();
  auto finish = [this, step](Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = Outcome{step, std::move(s)};
  };
  if (!opt_.async) {
    finish(write(step, meta, layout, fail_disk_full));
    return;
  }
  finished_ = false;
  thread_ = std::thread([this, step, meta = std::move(meta), layout = std::move(layout), fail_disk_full, finish] {
    // The writer thread's boundary (core/exception.h): what escapes the write fails this save.
    Status s = Status::Ok();
    try {
      s = write(step, meta, layout, fail_disk_full);
    } catch (...) {
      s = make_error("checkpoint of step ", step, ": ", current_exception_message());
    }
    finish(std::move(s));
    finished_ = true;
  });
}

std::optional<CheckpointWriter::Outcome> CheckpointWriter::poll() {
  if (thread_.joinable()) {
    if (!finished_) return std::nullopt;
    thread_.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<Outcome> out = std::move(pending_);
  pending_.reset();
  return out;
}

std::optional<CheckpointWriter::Outcome> CheckpointWriter::wait() {
  wait_idle();
  return poll();
}

}  // namespace herd::train
