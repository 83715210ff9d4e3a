// Wall-clock timing with a monotonic clock, and the calling thread's CPU clock.
#pragma once

#include <time.h>

#include <chrono>

namespace herd {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Seconds of CPU the calling thread has run: on one thread, a kernel's time on a core of its own even
// when other jobs share the cores (it does not count while descheduled).
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace herd
