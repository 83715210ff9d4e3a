// The preemption flag and its signal handlers (preempt.h).
#include "herd/train/preempt.h"

#include <signal.h>

#include <atomic>

namespace herd::train {

namespace {

std::atomic<bool> g_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

void on_preemption_signal(int) { g_requested.store(true, std::memory_order_relaxed); }

}  // namespace

void install_preemption_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_preemption_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

bool preemption_requested() { return g_requested.load(std::memory_order_relaxed); }
void request_preemption() { g_requested.store(true, std::memory_order_relaxed); }
void clear_preemption() { g_requested.store(false, std::memory_order_relaxed); }

}  // namespace herd::train
