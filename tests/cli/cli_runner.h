// Runs the herd binary as a user would and captures stdout, stderr and the exit status.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace herd::testing {

struct CliResult {
  int status = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `args` is appended to the binary's path verbatim (shell syntax); `env` ("NAME=value ...", may be
// empty) is set for the command alone.
inline CliResult run_herd_env(const std::string& env, const std::string& args) {
  static int counter = 0;
  const std::string base =
      ::testing::TempDir() + "herd_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const std::string cmd = env + " " + std::string(HERD_BINARY) + " " + args + " >" + base + ".out 2>" + base + ".err";
  CliResult r;
  const int raw = std::system(cmd.c_str());
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

inline CliResult run_herd(const std::string& args) { return run_herd_env("", args); }

// stdout and stderr as one stream in `out`, interleaved as a terminal shows them (`err` stays empty).
inline CliResult run_herd_combined(const std::string& args) {
  const std::string cmd = std::string(HERD_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  CliResult r;
  if (p == nullptr) return r;
  char buf[4096];
  while (const std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int raw = ::pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// Starts `cmd` under /bin/sh in a child process with SIGINT at its default, as a terminal's foreground
// job has it, and returns the child's pid (the caller signals and reaps it).
inline pid_t spawn_shell(const std::string& cmd) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGINT, SIG_DFL);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace herd::testing
