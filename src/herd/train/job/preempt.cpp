// The preemption flag and its signal handlers (preempt.h).
#include "herd/train/job/preempt.h"

#include <signal.h>

#include <atomic>

namespace herd::train {

namespace {

std::atomic<bool> g_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

std::atomic<int> g_stop_signal{0};  // the signal of the first stop request; 0: request_preemption()
std::atomic<unsigned> g_interrupts{0};

std::atomic<unsigned> g_dumps{0};
std::atomic<int> g_dump_signal{0};
static_assert(std::atomic<unsigned>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the signal handler needs lock-free counters");

void on_preemption_signal(int sig) {
  if (sig == SIGINT && g_interrupts.fetch_add(1, std::memory_order_relaxed) > 0) {
    // A second Ctrl-C: end the process at once, as SIGINT's default does (both calls are
    // async-signal-safe).
    ::signal(SIGINT, SIG_DFL);
    ::raise(SIGINT);
    return;
  }
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);
  if (sig == SIGUSR1) {
    g_dump_signal.store(sig, std::memory_order_relaxed);
    g_dumps.fetch_add(1, std::memory_order_relaxed);
  }
  g_requested.store(true, std::memory_order_relaxed);
}

void on_dump_signal(int sig) {
  g_dump_signal.store(sig, std::memory_order_relaxed);
  g_dumps.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void install_preemption_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_preemption_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  struct sigaction du {};
  du.sa_handler = on_dump_signal;
  sigemptyset(&du.sa_mask);
  du.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &du, nullptr);
}

bool preemption_requested() { return g_requested.load(std::memory_order_relaxed); }
void request_preemption() { g_requested.store(true, std::memory_order_relaxed); }
void clear_preemption() {
  g_requested.store(false, std::memory_order_relaxed);
  g_stop_signal.store(0, std::memory_order_relaxed);
  g_interrupts.store(0, std::memory_order_relaxed);
}
int preemption_exit_code() {
  return g_stop_signal.load(std::memory_order_relaxed) == SIGINT ? kInterruptedExitCode : kPreemptedExitCode;
}

unsigned dump_requests() { return g_dumps.load(std::memory_order_relaxed); }
const char* last_dump_signal() {
  const int s = g_dump_signal.load(std::memory_order_relaxed);
  return s == SIGUSR1 ? "SIGUSR1" : s == SIGUSR2 ? "SIGUSR2" : "request";
}
void request_dump() {
  g_dump_signal.store(0, std::memory_order_relaxed);
  g_dumps.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace herd::train
