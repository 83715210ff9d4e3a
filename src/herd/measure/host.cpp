// Host accounting from /proc: stat parsing, the process walk, runnable groups and CPU times.
#include "herd/measure/host.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "herd/core/proc_stat.h"

namespace herd::measure {

namespace fs = std::filesystem;

std::vector<std::string> stat_fields(const fs::path& file) {
  std::ifstream f(file);
  std::string stat;
  std::getline(f, stat);
  const auto close = stat.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos || close + 2 > stat.size()) return fields;
  std::istringstream in(stat.substr(close + 2));
  for (std::string x; in >> x;) fields.push_back(std::move(x));
  return fields;
}

std::vector<fs::path> other_processes() {
  const std::string self = std::to_string(::getpid());
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& proc : fs::directory_iterator("/proc", ec)) {
    const std::string name = proc.path().filename().string();
    if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0])) && name != self) out.push_back(proc.path());
  }
  return out;
}

namespace {

// Whether any thread of process `dir` is runnable, and that thread's nice.
bool runnable(const fs::path& dir, int* nice) {
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(dir / "task", ec)) {
    const std::vector<std::string> f = stat_fields(task.path() / "stat");
    if (f.size() < 17 || f[0] != "R") continue;
    *nice = std::atoi(f[16].c_str());
    return true;
  }
  return false;
}

// The scheduling group of a process: its autogroup ("/autogroup-61 nice 0") when the kernel groups
// sessions, else the process itself; and the group's nice.
std::string group_of(const fs::path& dir, int* nice) {
  std::ifstream f(dir / "autogroup");
  std::string name, word;
  if (f >> name >> word >> *nice) return name;
  return dir.filename().string();
}

// Other scheduling groups with a runnable thread, each weighted by CFS's 1.25^-nice relative share.
double background_weight() {
  int own_nice = 0;
  const std::string own = group_of("/proc/self", &own_nice);
  std::map<std::string, double> groups;
  for (const fs::path& proc : other_processes()) {
    int thread_nice = 0, group_nice = 0;
    if (!runnable(proc, &thread_nice)) continue;
    const std::string g = group_of(proc, &group_nice);
    if (g == own) continue;
    // Without autogroups the process stands for its group, at its thread's nice.
    const int nice = g == proc.filename().string() ? thread_nice : group_nice;
    groups[g] = std::pow(1.25, -static_cast<double>(nice));
  }
  double w = 0;
  for (const auto& [g, weight] : groups) w += weight;
  return w;
}

// utime + stime of a process, in clock ticks, from its stat fields.
double cpu_ticks(const std::vector<std::string>& f) {
  return f.size() < 13 ? 0.0 : std::atof(f[11].c_str()) + std::atof(f[12].c_str());
}

}  // namespace

double sample_background_jobs(int samples) {
  if (!fs::exists("/proc/self/task") || samples < 1) return 0;
  double sum = 0;
  for (int i = 0; i < samples; ++i) {
    sum += background_weight();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return sum / samples;
}

HostCpuTimes host_cpu_times() {
  HostCpuTimes t;
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const std::optional<HostTicks> ticks = read_host_ticks();
  if (!ticks || hz <= 0) return t;
  t.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  t.busy_s = ticks->busy / hz;
  const fs::path self = fs::path("/proc") / std::to_string(::getpid());
  const std::vector<std::string> own = stat_fields(self / "stat");
  if (own.size() < 13) return t;
  t.processes[::getpid()] = cpu_ticks(own) / hz;
  std::error_code ec;
  const fs::path exe = fs::read_symlink(self / "exe", ec);
  for (const fs::path& proc : other_processes()) {
    const std::vector<std::string> st = stat_fields(proc / "stat");
    if (st.size() < 13 || st[1] != own[1]) continue;  // not a sibling
    std::error_code e2;
    if (exe.empty() || fs::read_symlink(proc / "exe", e2) != exe) continue;
    t.processes[std::atoll(proc.filename().c_str())] = cpu_ticks(st) / hz;
  }
  t.ok = true;
  return t;
}

double job_seconds_between(const HostCpuTimes& a, const HostCpuTimes& b) {
  if (!a.ok || !b.ok) return -1;
  double s = 0;
  for (const auto& [pid, at_b] : b.processes) {
    const auto at_a = a.processes.find(pid);
    // A smaller reading is another process under a reused pid: it started after `a`.
    s += at_a == a.processes.end() || at_a->second > at_b ? at_b : at_b - at_a->second;
  }
  return s;
}

double background_jobs_between(const HostCpuTimes& a, const HostCpuTimes& b, std::int64_t cores) {
  const double wall = b.wall_s - a.wall_s;
  if (!a.ok || !b.ok || wall <= 0 || cores <= 0) return -1;
  const double c = static_cast<double>(cores);
  const double others = std::clamp(((b.busy_s - a.busy_s) - job_seconds_between(a, b)) / wall, 0.0, 0.95 * c);
  return others / (c - others);
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = 0;
  f >> l;
  return l;
}

}  // namespace herd::measure
