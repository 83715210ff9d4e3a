// FaultInjector (fault_injector.h): each fault at its point of the step.
#include "herd/train/job/fault_injector.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "herd/core/log.h"
#include "herd/model/weights.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "herd/train/job/fault_log.h"

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

namespace {

template <typename T>
class FaultInjector final : public StepHooks<T> {
 public:
  FaultInjector(const TrainConfig& cfg, const parallel::ParallelContext& ctx, std::int64_t resumed_from,
                std::function<void()> wait_for_saves)
      : f_(cfg.fault),
        dir_(cfg.checkpoint.dir),
        commit_timeout_s_(std::max(30.0, cfg.parallel.comm_timeout_s)),
        rank_(ctx.rank),
        world_(ctx.dims.world()),
        mpi_(std::string(ctx.world->backend()) == "mpi"),
        resumed_from_(resumed_from),
        wait_for_saves_(std::move(wait_for_saves)) {}

  Status before_step(std::int64_t step) override {
    if (f_.lose_rank == rank_ && f_.lose_step == step && !fault_fired(dir_, "lost@" + std::to_string(step))) {
      // Recorded first: the restarted job, on fewer ranks, does not lose it again.
      mark_fault_fired(dir_, "lost@" + std::to_string(step));
      log_warning("fault.lose_rank: rank ", rank_, " is lost for good at step ", step);
      if (mpi_) std::_Exit(3);
      return make_error("rank ", rank_, " is lost for good (fault.lose_rank) at step ", step);
    }
    if (f_.kill_rank == rank_ && f_.kill_step == step) HERD_RETURN_IF_ERROR(kill(step, "fault.kill_rank"));
    if (f_.kill_every > 0 && step % f_.kill_every == 0 && drawn_rank(f_.seed, step, world_) == rank_) {
      HERD_RETURN_IF_ERROR(kill(step, "fault.kill_every"));
    }
    if (f_.hang_rank == rank_ && f_.hang_step == step && !fault_fired(dir_, "hang@" + std::to_string(step))) {
      mark_fault_fired(dir_, "hang@" + std::to_string(step));
      log_warning("fault.hang_rank: rank ", rank_, " stops for ", f_.hang_seconds, " s at step ", step);
      std::this_thread::sleep_for(std::chrono::duration<double>(f_.hang_seconds));
    }
    return Status::Ok();
  }

  // fault.nan_step: a NaN in the gradient of the first attention weight this rank holds, so the guard's
  // report is easy to check.
  void after_backward(std::int64_t step, parallel::RankModel<T>& model) override {
    const std::string key = "nan@" + std::to_string(step);
    if (f_.nan_step != step || f_.nan_rank != rank_ || fault_fired(dir_, key)) return;
    mark_fault_fired(dir_, key);
    std::vector<parallel::ShardPiece<T>> pieces = model.shard_pieces();
    const parallel::ShardPiece<T>* target = nullptr;
    for (const parallel::ShardPiece<T>& p : pieces) {
      if (p.count() > 0 && p.g != nullptr &&
          (target == nullptr || (std::string(model::weight_group(p.name)) == "attention" &&
                                 std::string(model::weight_group(target->name)) != "attention"))) {
        target = &p;
      }
    }
    if (target == nullptr) return;
    target->g[0] = std::numeric_limits<T>::quiet_NaN();
    log_warning("fault.nan_step: rank ", rank_, " puts a NaN into the gradient of ", target->name, " (",
                model::weight_group(target->name), ") at step ", step);
  }

  // fault.slow_rank: the rank's step takes slow_factor x its compute time: the rank computes
  // (slow_factor - 1) x its step's CPU time more (fault.slow_mode=compute: a slower core), or sleeps it
  // (stall: a rank stopped or preempted while it should compute), both through the step's clock. Its
  // start is recorded as "slow@S".
  void after_update(std::int64_t step, StepClock& clock) override {
    if (f_.slow_rank != rank_ || step < f_.slow_from_step || f_.slow_factor <= 1) return;
    const std::string key = "slow@" + std::to_string(f_.slow_from_step);
    if (step == f_.slow_from_step || step == resumed_from_ + 1) {  // the first slowed step of this process
      if (!fault_fired(dir_, key)) mark_fault_fired(dir_, key);
      log_warning("fault.slow_rank: rank ", rank_, "'s steps take ", f_.slow_factor, " x longer from step ",
                  f_.slow_from_step);
    }
    const double extra = (f_.slow_factor - 1) * std::max(0.0, clock.split(step).busy_s);
    if (f_.slow_mode == "stall") {
      clock.stall_for(extra);
    } else {
      clock.compute_for(extra);
    }
  }

  bool fail_save(std::int64_t step) override {
    const std::string key = "ckptfail@" + std::to_string(step);
    if (f_.fail_checkpoint_step != step || rank_ != 0 || fault_fired(dir_, key)) return false;
    mark_fault_fired(dir_, key);
    log_warning("fault.fail_checkpoint_step: the save of step ", step, " fails as a full disk would");
    return true;
  }

 private:
  Status kill(std::int64_t step, const std::string& why) {
    const std::string key = "kill@" + std::to_string(step);
    if (fault_fired(dir_, key)) return Status::Ok();
    if (f_.corrupt_checkpoint && !dir_.empty() && !fault_fired(dir_, "corrupt@" + std::to_string(step))) {
      mark_fault_fired(dir_, "corrupt@" + std::to_string(step));
      // "The newest checkpoint" is the one last saved: an asynchronous save still being written finishes
      // first (this rank's shard, then rank 0's commit).
      if (wait_for_saves_) {
        wait_for_saves_();
        wait_for_commit(dir_, commit_timeout_s_);
      }
      corrupt_newest_shard(dir_, rank_);
    }
    mark_fault_fired(dir_, key);
    log_warning(why, ": rank ", rank_, " exits at step ", step);
    if (mpi_) std::_Exit(3);
    return make_error("rank ", rank_, " stopped by ", why, " at step ", step);
  }

  FaultSection f_;
  std::string dir_;
  double commit_timeout_s_;
  int rank_;
  std::int64_t world_;
  bool mpi_;
  std::int64_t resumed_from_;
  std::function<void()> wait_for_saves_;
};

}  // namespace

template <typename T>
std::unique_ptr<StepHooks<T>> make_fault_injector(const TrainConfig& cfg, const parallel::ParallelContext& ctx,
                                                  std::int64_t resumed_from, std::function<void()> wait_for_saves) {
  const FaultSection& f = cfg.fault;
  const bool any = f.kill_rank >= 0 || f.kill_every > 0 || f.hang_rank >= 0 || f.nan_step > 0 || f.slow_rank >= 0 ||
                   f.fail_checkpoint_step > 0 || f.lose_rank >= 0;
  if (!any) return nullptr;
  return std::make_unique<FaultInjector<T>>(cfg, ctx, resumed_from, std::move(wait_for_saves));
}

template std::unique_ptr<StepHooks<float>> make_fault_injector<float>(const TrainConfig&,
                                                                      const parallel::ParallelContext&, std::int64_t,
                                                                      std::function<void()>);
template std::unique_ptr<StepHooks<double>> make_fault_injector<double>(const TrainConfig&,
                                                                        const parallel::ParallelContext&, std::int64_t,
                                                                        std::function<void()>);

}  // namespace herd::train
