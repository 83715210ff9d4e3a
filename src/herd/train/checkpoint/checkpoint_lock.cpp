// The checkpoint directory's owner lock (checkpoint_lock.h).
#include "herd/train/checkpoint/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "herd/core/json.h"
#include "herd/core/json_text.h"
#include "herd/core/launch_env.h"

namespace herd::train {

namespace {

namespace fs = std::filesystem;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The parent of `pid` (from /proc/PID/stat), or 0 when unknown.
pid_t parent_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  char state = 0;
  long ppid = 0;
  if (std::sscanf(stat.c_str() + close + 1, " %c %ld", &state, &ppid) != 2) return 0;
  return static_cast<pid_t>(ppid);
}

bool is_ancestor(pid_t pid) {
  if (pid <= 1) return false;
  pid_t p = ::getppid();
  for (int hops = 0; hops < 64 && p > 1; ++hops) {
    if (p == pid) return true;
    p = parent_of(p);
  }
  return false;
}

std::string read_all(int fd) {
  std::string text;
  char buf[512];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
    if (text.size() > 4096) break;
  }
  return text;
}

bool write_all(int fd, const std::string& text) {
  if (::ftruncate(fd, 0) != 0) return false;
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::pwrite(fd, text.data() + off, text.size() - off, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

CheckpointDirLock& CheckpointDirLock::operator=(CheckpointDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor of the open file releases the flock
}

Result<CheckpointDirLock> CheckpointDirLock::acquire(const std::string& dir, const std::string& command) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return make_error("checkpoint.dir '", dir, "': cannot create it (", ec.message(), "); choose a writable directory");
  }
  const std::string path = (fs::path(dir) / kFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return make_error("checkpoint.dir '", dir, "': cannot open its lock file ", path, " (", std::strerror(errno),
                      "); choose a writable directory");
  }
  int rc;
  while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc == 0) {
    const Json me = {
        {"command", command}, {"pid", static_cast<long>(::getpid())}, {"host", this_host()}, {"since", utc_now()}};
    if (!write_all(fd, json_text(me) + "\n")) {
      const int err = errno;
      ::close(fd);
      return make_error("checkpoint.dir '", dir, "': cannot write its lock file ", path, " (", std::strerror(err),
                        "); free space or choose another directory");
    }
    return CheckpointDirLock(fd);
  }
  const int err = errno;
  const std::string text = read_all(fd);
  ::close(fd);
  if (err != EWOULDBLOCK) {
    return make_error("checkpoint.dir '", dir, "': cannot lock ", path, " (", std::strerror(err),
                      "); choose a directory on a filesystem that supports flock");
  }
  // Read through parse_json_text like every other file herd reads (a lock file is outside input too); a
  // file it refuses names no holder.
  const Result<Json> parsed = parse_json_text(text, path);
  const Json holder = parsed.ok() ? parsed.value() : Json();
  const bool named = holder.is_object() && holder.contains("pid") && holder["pid"].is_number_integer() &&
                     holder.contains("host") && holder["host"].is_string();
  if (!named) {
    return make_error("checkpoint.dir '", dir, "' is in use by another herd job (", path,
                      " is locked); stop that job or choose another checkpoint.dir");
  }
  const auto pid = holder["pid"].get<long>();
  const std::string host = holder["host"].get<std::string>();
  // The supervisor of this job (herd train --max-restarts, herd launch) holds it for the job.
  if (host == this_host() && is_ancestor(static_cast<pid_t>(pid))) return CheckpointDirLock();
  auto text_or = [&](const char* key, const char* fallback) {
    return holder.contains(key) && holder[key].is_string() ? holder[key].get<std::string>() : std::string(fallback);
  };
  return make_error("checkpoint.dir '", dir, "' is in use by ", text_or("command", "herd"), " pid ", pid, " on host ",
                    host, " since ", text_or("since", "an unknown time"),
                    "; stop that job or choose another checkpoint.dir");
}

}  // namespace herd::train
