// The thread's scheduler clock from /proc/thread-self/schedstat (see thread_clock.h).
#include "herd/measure/thread_clock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "herd/measure/timing.h"

namespace herd::measure {

namespace {

// One open schedstat file per thread, closed when the thread ends.
class SchedStatFile {
 public:
  SchedStatFile() : fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}
  ~SchedStatFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  SchedStatFile(const SchedStatFile&) = delete;
  SchedStatFile& operator=(const SchedStatFile&) = delete;

  // "<ns on cpu> <ns waiting on a runqueue> <timeslices>": the queued time into *out; false when
  // unreadable. (The CPU time there is the kernel's count as of the thread's last scheduling event, which
  // lags the running slice by up to a tick; the thread's CPU clock does not.)
  bool read_queued(ThreadClock* out) const {
    if (fd_ < 0) return false;
    char buf[96];
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    if (n <= 0) return false;
    buf[n] = '\0';
    char* end = nullptr;
    const unsigned long long cpu_ns = std::strtoull(buf, &end, 10);
    if (end == buf) return false;
    char* end2 = nullptr;
    const unsigned long long queued_ns = std::strtoull(end, &end2, 10);
    if (end2 == end) return false;
    (void)cpu_ns;
    out->queued_s = 1e-9 * static_cast<double>(queued_ns);
    return true;
  }

 private:
  int fd_;
};

const SchedStatFile& this_thread_file() {
  thread_local const SchedStatFile file;
  return file;
}

}  // namespace

ThreadClock thread_clock() {
  ThreadClock c;
  this_thread_file().read_queued(&c);
  c.cpu_s = thread_cpu_seconds();
  return c;
}

bool thread_clock_has_queue() {
  ThreadClock c;
  return this_thread_file().read_queued(&c);
}

}  // namespace herd::measure
