// Trainer's fault injection (the fault.* section, for tests and drills): a rank killed or hung at a
// step, a corrupted checkpoint shard, a slowed rank, a NaN in a gradient. Each one-shot fault is
// recorded in the checkpoint directory's fault log so that a restarted job does not repeat it.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "herd/core/log.h"
#include "herd/model/weights.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/job/fault_log.h"
#include "herd/train/step/trainer.h"

namespace herd::train {

namespace {

// The rank fault.kill_every draws for `step`: a splitmix64 of (seed, step), the same on every rank.
std::int64_t drawn_rank(std::int64_t seed, std::int64_t step, std::int64_t world) {
  std::uint64_t z = static_cast<std::uint64_t>(seed) * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(step);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<std::int64_t>(z % static_cast<std::uint64_t>(world));
}

// Waits (at most timeout_s) until no save is in progress in dir: rank 0 commits an asynchronous save
// (renames its .tmp-step_ directory into place) once every rank's shard is in.
void wait_for_commit(const std::string& dir, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    bool pending = false;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      pending = pending || e.path().filename().string().rfind(".tmp-step_", 0) == 0;
    }
    if (!pending || std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// fault.corrupt_checkpoint: flips one byte in the middle of this rank's shard of the newest checkpoint.
void corrupt_newest_shard(const std::string& dir, int rank) {
  const std::vector<std::string> steps = list_checkpoints(dir);
  if (steps.empty()) {
    log_warning("fault.corrupt_checkpoint: no checkpoint in ", dir, " to corrupt");
    return;
  }
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.bin", rank);
  const std::filesystem::path shard = std::filesystem::path(steps.front()) / name;
  std::error_code ec;
  const auto size = std::filesystem::file_size(shard, ec);
  std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
  if (ec || size == 0 || !f) {
    log_warning("fault.corrupt_checkpoint: ", shard.string(), " cannot be opened; nothing corrupted");
    return;
  }
  const auto at = static_cast<std::streamoff>(size / 2);
  char byte = 0;
  f.seekg(at);
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x5a);
  f.seekp(at);
  f.write(&byte, 1);
  f.flush();
  log_warning("fault.corrupt_checkpoint: rank ", rank, " flipped a byte of ", shard.string());
}

}  // namespace

template <typename T>
Status Trainer<T>::inject_kill(std::int64_t step, const std::string& why) {
  const std::string& dir = cfg_.checkpoint.dir;
  const std::string key = "kill@" + std::to_string(step);
  if (fault_fired(dir, key)) return Status::Ok();
  if (cfg_.fault.corrupt_checkpoint && !dir.empty() && !fault_fired(dir, "corrupt@" + std::to_string(step))) {
    mark_fault_fired(dir, "corrupt@" + std::to_string(step));
    // "The newest checkpoint" is the one last saved: an asynchronous save still being written finishes
    // first (this rank's shard, then rank 0's commit).
    if (writer_) {
      writer_->wait_idle();
      wait_for_commit(dir, std::max(30.0, cfg_.parallel.comm_timeout_s));
    }
    corrupt_newest_shard(dir, ctx_.rank);
  }
  mark_fault_fired(dir, key);
  log_warning(why, ": rank ", ctx_.rank, " exits at step ", step);
  if (std::string(ctx_.world->backend()) == "mpi") std::_Exit(3);
  return make_error("rank ", ctx_.rank, " stopped by ", why, " at step ", step);
}

template <typename T>
Status Trainer<T>::maybe_inject_fault() {
  const FaultSection& f = cfg_.fault;
  const std::int64_t next = step_ + 1;
  const std::string& dir = cfg_.checkpoint.dir;
  if (f.kill_rank == ctx_.rank && f.kill_step == next) HERD_RETURN_IF_ERROR(inject_kill(next, "fault.kill_rank"));
  if (f.kill_every > 0 && next % f.kill_every == 0 && drawn_rank(f.seed, next, ctx_.dims.world()) == ctx_.rank) {
    HERD_RETURN_IF_ERROR(inject_kill(next, "fault.kill_every"));
  }
  if (f.hang_rank == ctx_.rank && f.hang_step == next && !fault_fired(dir, "hang@" + std::to_string(next))) {
    mark_fault_fired(dir, "hang@" + std::to_string(next));
    log_warning("fault.hang_rank: rank ", ctx_.rank, " stops for ", f.hang_seconds, " s at step ", next);
    std::this_thread::sleep_for(std::chrono::duration<double>(f.hang_seconds));
  }
  return Status::Ok();
}

// fault.slow_rank: the rank's step takes slow_factor x its compute time (a straggler; unlike the one-shot
// faults it persists across restarts, as a slow host would): the rank computes (slow_factor - 1) x its
// step's CPU time more (fault.slow_mode=compute: a slower core), or sleeps it (stall: a rank stopped or
// preempted while it should compute), both through the step's clock. Its start is recorded as "slow@S".
template <typename T>
void Trainer<T>::maybe_slow_down(StepClock& clock) {
  const FaultSection& f = cfg_.fault;
  if (f.slow_rank != ctx_.rank || step_ < f.slow_from_step || f.slow_factor <= 1) return;
  const std::string key = "slow@" + std::to_string(f.slow_from_step);
  if (step_ == f.slow_from_step || step_ == resumed_from_ + 1) {  // the first slowed step of this process
    if (!fault_fired(cfg_.checkpoint.dir, key)) mark_fault_fired(cfg_.checkpoint.dir, key);
    log_warning("fault.slow_rank: rank ", ctx_.rank, "'s steps take ", f.slow_factor, " x longer from step ",
                f.slow_from_step);
  }
  const double extra = (f.slow_factor - 1) * std::max(0.0, clock.split(step_).busy_s);
  if (f.slow_mode == "stall") {
    clock.stall_for(extra);
  } else {
    clock.compute_for(extra);
  }
}

template <typename T>
void Trainer<T>::maybe_inject_nan() {
  const std::int64_t next = step_ + 1;
  const std::string key = "nan@" + std::to_string(next);
  if (cfg_.fault.nan_step != next || cfg_.fault.nan_rank != ctx_.rank || fault_fired(cfg_.checkpoint.dir, key)) return;
  mark_fault_fired(cfg_.checkpoint.dir, key);
  // The first attention weight this rank holds, so the guard's report is easy to check.
  std::vector<ShardPiece<T>> pieces = model_->shard_pieces();
  const ShardPiece<T>* target = nullptr;
  for (const ShardPiece<T>& p : pieces) {
    if (p.count() > 0 && p.g != nullptr &&
        (target == nullptr || (std::string(model::weight_group(p.name)) == "attention" &&
                               std::string(model::weight_group(target->name)) != "attention"))) {
      target = &p;
    }
  }
  if (target == nullptr) return;
  target->g[0] = std::numeric_limits<T>::quiet_NaN();
  log_warning("fault.nan_step: rank ", ctx_.rank, " puts a NaN into the gradient of ", target->name, " (",
              model::weight_group(target->name), ") at step ", next);
}

#define HERD_TRAINER_FAULTS(T)                                               \
  template Status Trainer<T>::inject_kill(std::int64_t, const std::string&); \
  template Status Trainer<T>::maybe_inject_fault();                          \
  template void Trainer<T>::maybe_slow_down(StepClock&);                     \
  template void Trainer<T>::maybe_inject_nan();
HERD_TRAINER_FAULTS(float)
HERD_TRAINER_FAULTS(double)
#undef HERD_TRAINER_FAULTS

}  // namespace herd::train
