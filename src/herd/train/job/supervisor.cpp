// The supervisor's process handling: fork/exec, stderr pass-through, signal forwarding, restarts (see
// supervisor.h).
#include "herd/train/job/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "herd/comm/trace_analysis.h"
#include "herd/core/file_write.h"
#include "herd/core/format.h"
#include "herd/core/json_text.h"
#include "herd/core/log.h"
#include "herd/train/job/preempt.h"
#include "herd/train/step/metrics.h"

namespace herd::train {

namespace {

volatile sig_atomic_t g_signal = 0;  // the last signal forwarded
volatile pid_t g_child = 0;          // the child's process group, while one runs

extern "C" void forward_signal(int sig) {
  if (sig != SIGUSR2) g_signal = sig;  // SIGUSR2 only asks for flight-recorder dumps: the job goes on
  const pid_t child = g_child;
  if (child > 0) ::kill(-child, sig);
}

struct SignalForwarding {
  struct sigaction old[4];
  static constexpr int kSignals[4] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
  SignalForwarding() {
    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a blocking read or sleep returns to look at g_signal
    for (int i = 0; i < 4; ++i) sigaction(kSignals[i], &sa, &old[i]);
  }
  ~SignalForwarding() {
    for (int i = 0; i < 4; ++i) sigaction(kSignals[i], &old[i], nullptr);
  }
};

void say(const std::string& line) { log_line(LogLevel::kInfo, "herd supervisor: " + line); }

// Runs one attempt: the child's stderr is copied to ours; `errors` gets its lines that report errors.
int run_child(const std::vector<std::string>& args, std::vector<std::string>* errors) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    // The child dies with the supervisor, however the supervisor ends (kill -9 included): the kernel
    // sends it SIGKILL when its parent exits. The getppid check closes the race of a parent that died
    // before the request was made.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::setpgid(0, 0);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "herd supervisor: error: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: whichever of the two runs first
  g_child = pid;
  if (g_signal != 0) ::kill(-pid, g_signal);  // a signal that came while forking
  ::close(fds[1]);
  std::string line;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    ssize_t off = 0;
    while (off < n) {
      const ssize_t w = ::write(2, buf + off, static_cast<std::size_t>(n - off));
      if (w <= 0 && errno != EINTR) break;
      if (w > 0) off += w;
    }
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        line += buf[i];
        continue;
      }
      if (line.find("error") != std::string::npos || line.find("exits at step") != std::string::npos ||
          line.find("lost for good") != std::string::npos) {
        errors->push_back(line);
      }
      line.clear();
    }
  }
  ::close(fds[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

std::string describe_exit(int code) {
  if (code > 128 && code < 160)
    return "killed by signal " + std::to_string(code - 128) + " (status " + std::to_string(code) + ")";
  if (code < 0) return "could not be started";
  return "exit status " + std::to_string(code);
}

// The flight-recorder dumps an attempt left, and the reason the first of them gives.
void report_dumps(const std::string& dir, const std::string& attempt_id) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> found;
  const std::string prefix = "herd_flight_" + attempt_id + "_rank";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > 5 && name.substr(name.size() - 5) == ".json") {
      found.push_back(it->path().string());
    }
  }
  if (found.empty()) return;
  std::sort(found.begin(), found.end());
  std::string reason;
  const Result<Json> j = read_json_file(found.front());
  if (j.ok() && j->is_object() && j->contains("reason") && (*j)["reason"].is_string()) {
    reason = (*j)["reason"].get<std::string>();
  }
  say("flight recorders: " + std::to_string(found.size()) + " dump(s) in " + dir + " (" + prefix + "*.json)" +
      (reason.empty() ? "" : "; " + reason));
  // A hang (a collective's timeout or the watchdog): the dumps read across ranks (what `herd trace`
  // reports) name the culprit, not the victims of the cascade. A rank that exited is named already, and
  // the others' dumps then only show where the abort found them.
  if (reason.find("timeout") == std::string::npos && reason.find("watchdog") == std::string::npos) return;
  Result<comm::JobDumps> dumps = comm::read_job_dumps(dir, attempt_id);
  if (!dumps.ok()) return;
  const comm::TraceReport t = comm::analyze_dumps(dumps->ranks, dumps->job);
  std::string culprits;
  for (int r : t.culprit_ranks) {
    std::string where;
    for (const comm::RankState& s : t.ranks) {
      if (s.rank != r) continue;
      where = s.in + (s.last_step ? ", last step " + std::to_string(*s.last_step) : "");
    }
    culprits += (culprits.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) +
                (where.empty() ? "" : " (" + where + ")");
  }
  if (!culprits.empty()) {
    say("herd trace: culprit " + culprits + (t.desync.empty() ? "" : "; and a desync of the collectives") +
        "; `herd trace " + dir + " --job " + attempt_id + "` shows every rank");
  } else if (!t.desync.empty()) {
    say("herd trace: the ranks issued different collectives (a desync); `herd trace " + dir + " --job " + attempt_id +
        "` shows them");
  }
}

// The rank named first in the child's error lines ("rank 3"), or "" when none is.
std::string blamed_rank(const std::vector<std::string>& errors) {
  for (const std::string& e : errors) {
    for (const char* pat :
         {"fault.kill_rank: rank ", "fault.kill_every: rank ", "watchdog: rank ", "global ranks ", "rank "}) {
      const std::size_t at = e.find(pat);
      if (at == std::string::npos) continue;
      std::size_t b = at + std::strlen(pat), en = b;
      while (en < e.size() && (std::isdigit(static_cast<unsigned char>(e[en])) || e[en] == ',')) ++en;
      if (en > b) return e.substr(b, en - b);
    }
  }
  return "";
}

// The supervisor's status after a forwarded signal ended the job: 130 for SIGINT, 143 for the others.
int signalled_exit_code() { return g_signal == SIGINT ? kInterruptedExitCode : kPreemptedExitCode; }

bool sleep_unless_signalled(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (g_signal != 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return g_signal == 0;
}

}  // namespace

std::vector<std::int64_t> lost_ranks(const std::vector<std::string>& lines) {
  static const std::string kPrefix = "rank ", kSuffix = " is lost for good";
  std::vector<std::int64_t> out;
  for (const std::string& l : lines) {
    for (std::size_t at = l.find(kSuffix); at != std::string::npos; at = l.find(kSuffix, at + 1)) {
      std::size_t b = at;
      while (b > 0 && std::isdigit(static_cast<unsigned char>(l[b - 1]))) --b;
      if (b == at || b < kPrefix.size() || l.compare(b - kPrefix.size(), kPrefix.size(), kPrefix) != 0) continue;
      const std::size_t word = b - kPrefix.size();  // "rank" is a word of its own, not the end of one
      if (word > 0 && std::isalnum(static_cast<unsigned char>(l[word - 1]))) continue;
      const std::int64_t r = std::stoll(l.substr(b, at - b));
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string self_executable() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("herd") : p.string();
}

void end_with_supervisor() {
  const char* env = std::getenv(kSupervisorPidEnv);
  if (env == nullptr) return;
  char* end = nullptr;
  const long supervisor = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || supervisor <= 1) return;
  if (supervisor == static_cast<long>(::getppid())) return;  // a direct child: PR_SET_PDEATHSIG covers it
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(supervisor), 0));
  if (fd < 0) {
    if (errno == ESRCH) ::kill(::getpid(), SIGKILL);  // the supervisor is gone already
    // A kernel without pidfd_open (before Linux 5.3): die with the parent, which dies with the supervisor.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    return;
  }
  // The pidfd becomes readable when the supervisor exits, however it exits.
  std::thread([fd] {
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    ::kill(::getpid(), SIGKILL);
  }).detach();
}

int run_supervised(const SupervisorOptions& o, EttSummary* summary_out) {
  SignalForwarding forwarding;
  g_signal = 0;
  // The job's processes below the child (the MPI ranks under mpirun) watch this process through it
  // (end_with_supervisor).
  ::setenv(kSupervisorPidEnv, std::to_string(::getpid()).c_str(), 1);
  const double wall_start = unix_time();
  std::vector<Attempt> attempts;
  int result = 0;
  say("job " + o.job_id + ": up to " + std::to_string(o.max_restarts) + " restart(s); metrics " + o.metrics_file +
      ", diagnostics " + o.diagnostics_dir);
  std::int64_t stalled = 0;  // failed attempts in a row that trained no step
  std::vector<std::string> command = o.command;
  std::int64_t ranks = o.ranks;
  for (std::int64_t k = 0;; ++k) {
    const std::string attempt_id = o.job_id + "-" + std::to_string(k);
    std::vector<std::string> launcher_args;
    if (o.discover) {
      Result<SupervisorOptions::Discovered> d = o.discover();
      if (!d.ok()) {
        say("host discovery failed (" + d.error().message() + "); attempt " + std::to_string(k) +
            " runs on the hosts of the command");
      } else {
        launcher_args = d->launcher_args;
        const std::int64_t budget = std::min(d->slots, o.ranks);
        if (o.replan && budget > 0 && budget != ranks) {
          Result<std::vector<std::string>> next = o.replan(budget);
          if (next.ok()) {
            say("elastic: the hosts hold " + std::to_string(d->slots) + " slot(s) (" + d->hosts + "); attempt " +
                std::to_string(k) + " runs on " + std::to_string(budget) + " of the job's " + std::to_string(o.ranks) +
                " rank(s)");
            command = std::move(*next);
            ranks = budget;
          } else {
            say("elastic: no layout on the " + std::to_string(budget) + " rank(s) the hosts hold (" +
                next.error().message() + "); attempt " + std::to_string(k) + " keeps its layout");
          }
        }
      }
    }
    std::vector<std::string> args = command;
    if (!args.empty()) args.insert(args.begin() + 1, launcher_args.begin(), launcher_args.end());
    args.push_back("--diagnostics.job_id=" + attempt_id);
    if (k > 0) args.push_back("--checkpoint.fallback=true");
    Attempt a;
    a.start = unix_time();
    std::vector<std::string> errors;
    a.exit_code = run_child(args, &errors);
    a.end = unix_time();
    a.records = read_step_records(o.metrics_file, a.start);
    attempts.push_back(std::move(a));
    const int code = attempts.back().exit_code;
    if (code == 0) {
      result = 0;
      break;
    }
    if (g_signal != 0) {
      say("attempt " + std::to_string(k) + " ended (status " + std::to_string(code) + ") after signal " +
          std::to_string(static_cast<int>(g_signal)) + " was forwarded: preempted, not restarted");
      result = signalled_exit_code();
      break;
    }
    const std::string rank = blamed_rank(errors);
    say("attempt " + std::to_string(k) + " failed: " + describe_exit(code) +
        (rank.empty() ? "" : "; failed rank(s): " + rank) + (errors.empty() ? "" : "; " + errors.front()));
    report_dumps(o.diagnostics_dir, attempt_id);
    const std::vector<std::int64_t> lost = o.replan ? lost_ranks(errors) : std::vector<std::int64_t>{};
    if (!lost.empty() && k < o.max_restarts) {
      const std::int64_t survivors = ranks - static_cast<std::int64_t>(lost.size());
      Result<std::vector<std::string>> next =
          survivors > 0 ? o.replan(survivors) : Result<std::vector<std::string>>(make_error("no rank survives"));
      if (next.ok()) {
        command = std::move(*next);
        say("elastic: " + std::to_string(lost.size()) + " rank(s) lost for good; the next attempt runs on " +
            std::to_string(survivors) + " of " + std::to_string(ranks));
        ranks = survivors;
      } else {
        say("elastic: no layout on the " + std::to_string(survivors) + " surviving rank(s) (" + next.error().message() +
            "); restarting at the same layout");
      }
    }
    if (k >= o.max_restarts) {
      say("giving up: " + std::to_string(o.max_restarts) + " restart(s) used (fault.max_restarts)");
      result = code > 0 && code != kPreemptedExitCode && code != kInterruptedExitCode ? code : 1;
      break;
    }
    // The backoff doubles only while attempts fail before training a step (a crash loop); an attempt that
    // trained resets it, so the occasional failures of a long job each wait fault.restart_backoff_s.
    stalled = attempts.back().records.empty() ? stalled + 1 : 0;
    const double wait = std::min(60.0, o.backoff_s * std::pow(2.0, static_cast<double>(stalled)));
    say("restart " + std::to_string(k + 1) + " of " + std::to_string(o.max_restarts) + " in " + format_seconds(wait) +
        ", from the newest checkpoint that verifies");
    if (!sleep_unless_signalled(wait)) {
      say("signal " + std::to_string(static_cast<int>(g_signal)) + " during the backoff: not restarted");
      result = signalled_exit_code();
      break;
    }
  }
  const EttSummary s = account_ett(attempts, wall_start, unix_time());
  for (const std::string& line : s.lines()) say(line);
  if (!o.metrics_file.empty()) {
    Json j = s.to_json();
    j["job_id"] = o.job_id;
    j["exit"] = result;
    if (Status w = write_file(o.metrics_file, json_text(j) + "\n", /*append=*/true); !w.ok()) {
      log_line(LogLevel::kError, "herd supervisor: error: train.metrics_file: " + w.error().message() +
                                     "; the time accounting above is not in it");
      if (result == 0) result = 1;
    }
  }
  if (summary_out) *summary_out = s;
  return result;
}

}  // namespace herd::train
