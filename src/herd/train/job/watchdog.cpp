// The watchdog thread and the fitted default of parallel.comm_timeout_s (see watchdog.h).
#include "herd/train/job/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "herd/core/format.h"
#include "herd/core/log.h"
#include "herd/model/params.h"
#include "herd/train/job/preempt.h"
#include "herd/train/plan/projection.h"

namespace herd::train {

Watchdog::Watchdog(std::vector<std::shared_ptr<comm::FlightRecorder>> recorders, int first_rank,
                   WatchdogOptions options, std::function<void(const std::string&)> on_stall,
                   std::function<bool()> aborted)
    : recorders_(std::move(recorders)),
      first_rank_(first_rank),
      opts_(options),
      on_stall_(std::move(on_stall)),
      aborted_(std::move(aborted)),
      done_(recorders_.size()) {
  for (auto& d : done_) d.store(false);
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::rank_done(int i) { done_[static_cast<std::size_t>(i)].store(true); }

std::string Watchdog::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

void Watchdog::serve_dump_request(unsigned& seen) {
  const unsigned d = dump_requests();
  if (d == seen) return;
  seen = d;
  if (!opts_.on_dump) return;
  std::string doing;
  for (std::size_t i = 0; i < recorders_.size(); ++i) {
    doing += (doing.empty() ? "" : ", ") +
             ("rank " + std::to_string(first_rank_ + static_cast<int>(i)) + ": " + recorders_[i]->last_activity());
  }
  opts_.on_dump(std::string(last_dump_signal()) + ": dump requested (" + doing + ")");
}

void Watchdog::loop() {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> failed_at;  // when the job failed (stall or abort), for the grace period
  std::string failure;
  unsigned dumps_seen = dump_requests();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::duration<double>(opts_.poll_s));
    if (stop_) break;
    if (dump_requests() != dumps_seen) {
      lock.unlock();
      serve_dump_request(dumps_seen);
      lock.lock();
    }
    bool all_done = true;
    int worst = -1;
    double worst_idle = 0;
    for (std::size_t i = 0; i < recorders_.size(); ++i) {
      if (done_[i].load()) continue;
      all_done = false;
      const double idle = recorders_[i]->idle_seconds();
      const bool started = !recorders_[i]->last_activity().empty();  // the trainer beats "step N"
      const double limit = started ? opts_.timeout_s : std::max(opts_.timeout_s, opts_.startup_s);
      if (idle > limit && idle > worst_idle) {
        worst = static_cast<int>(i);
        worst_idle = idle;
      }
    }
    if (all_done) break;
    if (!failed_at && worst >= 0 && fired_.empty()) {
      const std::string activity = recorders_[static_cast<std::size_t>(worst)]->last_activity();
      fired_ = "watchdog: rank " + std::to_string(first_rank_ + worst) + " has shown no sign of life for " +
               format_seconds(worst_idle) + " (parallel.comm_timeout_s = " + format_seconds(opts_.timeout_s) +
               (activity.empty() ? "" : "; last: " + activity) + "); it is hung";
      failure = fired_;
      failed_at = Clock::now();
      lock.unlock();
      on_stall_(fired_);
      lock.lock();
      continue;
    }
    if (!failed_at && aborted_ && aborted_()) {
      failure = "a collective failed";
      failed_at = Clock::now();
    }
    if (failed_at && opts_.exit_process &&
        std::chrono::duration<double>(Clock::now() - *failed_at).count() > opts_.grace_s) {
      std::string stuck;
      for (std::size_t i = 0; i < recorders_.size(); ++i) {
        if (done_[i].load()) continue;
        if (!stuck.empty()) stuck += ',';
        stuck += std::to_string(first_rank_ + static_cast<int>(i));
      }
      log_line(LogLevel::kError, "herd train: error: " + failure + "; rank(s) " + stuck + " did not return within " +
                                     format_seconds(opts_.grace_s) + "; ending the process (exit status 1)");
      std::fflush(stderr);
      std::fflush(stdout);
      std::_Exit(1);
    }
  }
  // A request that came as the job ended (SIGUSR1 preempts it within a step, faster than a poll) is
  // still answered: the recorders outlive the ranks.
  lock.unlock();
  serve_dump_request(dumps_seen);
}

double fitted_comm_timeout(const TrainConfig& cfg, const model::LlamaConfig& m, std::string* why) {
  if (cfg.parallel.comm_timeout_s > 0) {
    if (why) *why = "as set";
    return cfg.parallel.comm_timeout_s;
  }
  double step_s = 0;
  Result<ResolvedLayout> layout = resolve_layout(cfg);
  Result<topology::Cluster> cluster = local_cpu_cluster(cfg.projection.cluster_file);
  if (layout.ok() && cluster.ok()) {
    Result<Projection> p = project(m, *layout, static_cast<int>(cfg.train.threads), *cluster);
    if (p.ok()) step_s = p->step_s();
  }
  // Parameters and both AdamW moments in fp32, written by one host's disk at a conservative 200 MB/s.
  const double ckpt_bytes =
      cfg.checkpoint.dir.empty() ? 0 : 3.0 * 4.0 * static_cast<double>(model::model_params(m).total());
  const double write_s = ckpt_bytes / 200e6;
  const double t = std::max(60.0, 20.0 * step_s + write_s);
  if (why) {
    *why = "fitted: max(60 s, 20 x projected step " + format_seconds(step_s) + " + checkpoint write " +
           format_seconds(write_s) + ")";
  }
  return t;
}

TrainConfig with_comm_timeout(const TrainConfig& cfg, const model::LlamaConfig& m, bool log) {
  TrainConfig c = cfg;
  std::string why;
  c.parallel.comm_timeout_s = fitted_comm_timeout(cfg, m, &why);
  if (log) {
    log_info("collective and heartbeat timeout ", format_seconds(c.parallel.comm_timeout_s), " (", why,
             "; parallel.comm_timeout_s sets it)");
  }
  return c;
}

}  // namespace herd::train
