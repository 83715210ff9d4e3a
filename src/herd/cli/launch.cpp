// herd launch -np N [--max-restarts K] [--restart-backoff S] [--elastic] [--host-discovery CMD] [mpirun options]
//   -- herd train CONFIG ...:
// an MPI training job under the supervisor (train/job/supervisor.h). One dead MPI rank takes its whole
// mpirun down, so the supervisor sits outside: it runs `mpirun --oversubscribe -np N [options] herd
// train ... --supervised` as its child, restarts it from the newest checkpoint that verifies when it
// fails, forwards SIGTERM/SIGINT/SIGUSR1, and ends with the time accounting (ETT) as herd train
// --max-restarts does for ranks as threads. The train command's configuration (metrics file,
// checkpoint and diagnostics directories, fault.max_restarts) is read by running it with --print-config.
// With --elastic (or fault.elastic), a rank lost for good is followed by mpirun on the survivors at
// the fastest layout the planner finds for them (cli/elastic.h). --host-discovery CMD runs CMD before
// every attempt (lines host[:slots], as Horovod's discovery scripts print) and gives mpirun those hosts;
// with --elastic the attempt runs on the ranks they hold: fewer re-plan, the job's own count again grows
// back to its own layout.
// docs/reliability.md.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "herd/cli/app.h"
#include "herd/cli/elastic.h"
#include "herd/core/json.h"
#include "herd/core/log.h"
#include "herd/train/checkpoint/checkpoint_lock.h"
#include "herd/train/job/job.h"
#include "herd/train/job/supervisor.h"

namespace herd::cli {

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The train command's resolved configuration: its own --print-config output.
Result<Json> train_config_of(const std::vector<std::string>& train_cmd) {
  std::string cmd;
  for (const std::string& a : train_cmd) cmd += shell_quote(a) + " ";
  cmd += "--print-config 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  if (!p) return make_error("herd launch: cannot run ", train_cmd[0]);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p.get())) > 0;) text.append(buf, n);
  Result<Json> j = parse_json_text(text, "--print-config");
  if (!j.ok() || !j->is_object()) {
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return make_error("the train command was refused: ", text);
  }
  return j;
}

// The hosts `cmd` prints, one per line as host[:slots] (slots 1 when absent; blank lines and # comments
// skipped), as mpirun's --host list: what herd launch --host-discovery asks before every attempt.
Result<train::SupervisorOptions::Discovered> discover_hosts(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen((cmd + " 2>/dev/null").c_str(), "r"), ::pclose);
  if (!p) return make_error("--host-discovery: cannot run '", cmd, "'");
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p.get())) > 0;) text.append(buf, n);
  const int status = ::pclose(p.release());
  if (status != 0) return make_error("--host-discovery: '", cmd, "' exited with status ", WEXITSTATUS(status));
  train::SupervisorOptions::Discovered d;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    line = line.substr(0, line.find('#'));
    const auto b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) continue;
    line = line.substr(b, e - b + 1);
    const auto colon = line.find(':');
    std::int64_t slots = 1;
    if (colon != std::string::npos) {
      const std::string n = line.substr(colon + 1);
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 6 || std::stoll(n) < 1) {
        return make_error("--host-discovery: '", line, "' is not host[:slots] with slots a whole number >= 1");
      }
      slots = std::stoll(n);
    }
    if (colon == 0 || line.find_first_of(" \t,") != std::string::npos) {
      return make_error("--host-discovery: '", line, "' is not host[:slots]");
    }
    d.slots += slots;
    d.hosts += (d.hosts.empty() ? "" : ",") + line.substr(0, colon) + ":" + std::to_string(slots);
  }
  if (d.hosts.empty()) return make_error("--host-discovery: '", cmd, "' printed no host");
  d.launcher_args = {"--host", d.hosts};
  return d;
}

}  // namespace

int run_launch(const std::vector<std::string>& args) {
  std::int64_t np = 0;
  std::optional<std::int64_t> max_restarts;
  std::optional<double> backoff;
  bool elastic = false;
  std::string discovery;
  std::vector<std::string> mpirun_opts, train_cmd;
  bool after = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (after) {
      train_cmd.push_back(a);
      continue;
    }
    if (a == "--") {
      after = true;
      continue;
    }
    // The training command starts at `herd train` (also when the parser kept no "--").
    if (i + 1 < args.size() && args[i + 1] == "train" && std::filesystem::path(a).filename() == "herd") {
      after = true;
      train_cmd.push_back(a);
      continue;
    }
    auto value = [&](const std::string& flag) -> Result<std::string> {
      if (i + 1 >= args.size()) return make_error(flag, " needs a value");
      return args[++i];
    };
    try {
      if (a == "-np" || a == "-n" || a == "--np") {
        Result<std::string> v = value(a);
        if (!v.ok()) return report_error("launch", v.error());
        np = std::stoll(*v);
      } else if (a == "--elastic") {
        elastic = true;
      } else if (a == "--host-discovery") {
        Result<std::string> v = value(a);
        if (!v.ok()) return report_error("launch", v.error());
        discovery = *v;
      } else if (a == "--max-restarts") {
        Result<std::string> v = value(a);
        if (!v.ok()) return report_error("launch", v.error());
        max_restarts = std::stoll(*v);
      } else if (a == "--restart-backoff") {
        Result<std::string> v = value(a);
        if (!v.ok()) return report_error("launch", v.error());
        backoff = std::stod(*v);
      } else {
        mpirun_opts.push_back(a);
      }
    } catch (const std::exception&) {
      return report_error("launch", make_error(a, ": expected a number, got '", args[i], "'"));
    }
  }
  if (np <= 0)
    return report_error("launch",
                        make_error("-np: give the number of ranks, e.g. herd launch -np 4 -- herd train ..."));
  for (const std::string& o : mpirun_opts) {
    if (!discovery.empty() && (o == "--host" || o == "-H" || o == "--hostfile" || o == "--machinefile")) {
      return report_error(
          "launch", make_error("--host-discovery gives mpirun its hosts before every attempt; drop ", "mpirun's ", o));
    }
  }
  if (max_restarts && *max_restarts < 0) {
    return report_error("launch", make_error("--max-restarts: must be >= 0, got ", *max_restarts));
  }
  if (train_cmd.size() < 2 || train_cmd[1] != "train") {
    return report_error(
        "launch", make_error("after --, give the training command: herd launch -np ", np, " -- herd train CONFIG ..."));
  }
  const std::string prog = std::filesystem::path(train_cmd[0]).filename().string();
  if (prog == "herd") train_cmd[0] = train::self_executable();
  Result<Json> cfg = train_config_of(train_cmd);
  if (!cfg.ok()) return report_error("launch", cfg.error());
  const Json& c = *cfg;
  train::SupervisorOptions so;
  so.max_restarts = max_restarts ? *max_restarts : c["fault"]["max_restarts"].get<std::int64_t>();
  so.backoff_s = backoff ? *backoff : c["fault"]["restart_backoff_s"].get<double>();
  const std::string ckpt = c["checkpoint"]["dir"].get<std::string>();
  const std::string metrics = c["train"]["metrics_file"].get<std::string>();
  std::string diag = c["diagnostics"]["dir"].get<std::string>();
  if (diag.empty()) {
    diag = !ckpt.empty() ? (std::filesystem::path(ckpt) / "diagnostics").string()
           : !metrics.empty() && std::filesystem::path(metrics).has_parent_path()
               ? std::filesystem::path(metrics).parent_path().string()
               : std::filesystem::temp_directory_path().string();
  }
  so.diagnostics_dir = diag;
  so.job_id = c["diagnostics"]["job_id"].get<std::string>();
  if (so.job_id.empty()) so.job_id = train::make_job_id();
  so.command = {"mpirun", "--oversubscribe"};
  if (::geteuid() == 0) so.command.push_back("--allow-run-as-root");
  so.command.push_back("-np");
  so.command.push_back(std::to_string(np));
  so.command.insert(so.command.end(), mpirun_opts.begin(), mpirun_opts.end());
  so.command.insert(so.command.end(), train_cmd.begin(), train_cmd.end());
  so.command.push_back("--supervised");
  so.metrics_file = metrics;
  if (so.metrics_file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(diag, ec);
    so.metrics_file = (std::filesystem::path(diag) / ("metrics_" + so.job_id + ".jsonl")).string();
    so.command.push_back("--train.metrics_file=" + so.metrics_file);
  }
  if (elastic || c["fault"]["elastic"].get<bool>()) {
    // The planner needs the run's configuration and model: the train command's own, as it resolved them.
    train::TrainConfig tc;
    if (Status s = train::apply_json(tc, c, "the train command's configuration"); !s.ok()) {
      return report_error("launch", s.error());
    }
    Result<train::JobInputs> in = train::load_job_inputs(tc);
    if (!in.ok()) return report_error("launch", in.error());
    if (so.max_restarts < 1) {
      return report_error("launch", make_error("--elastic restarts the job on the surviving ranks, but "
                                               "--max-restarts is ",
                                               so.max_restarts, "; give --max-restarts K (K >= 1)"));
    }
    so.ranks = np;
    so.replan = elastic_replan(tc, in->model, so.command);
  }
  if (!discovery.empty()) so.discover = [discovery] { return discover_hosts(discovery); };
  if (ckpt.empty()) {
    log_warning("herd launch without checkpoint.dir: every restart starts again from step 0");
    return train::run_supervised(so);
  }
  // herd launch owns checkpoint.dir for the whole job; the ranks, its descendants, train under it
  // (train/checkpoint/checkpoint_lock.h).
  Result<train::CheckpointDirLock> lock = train::CheckpointDirLock::acquire(ckpt, "herd launch");
  if (!lock.ok()) return report_error("launch", lock.error());
  return train::run_supervised(so);
}

Subcommand add_launch_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand(
      "launch", "Run an MPI training job (mpirun) under a supervisor that restarts it when a rank fails");
  // The arguments are parsed by run_launch (app.cpp dispatches to it before CLI11 sees them); this
  // subcommand is here for `herd --help` and `herd launch --help`.
  app->allow_extras();
  app->footer(
      "Usage: herd launch -np N [--max-restarts K] [--restart-backoff S] [--elastic] [--host-discovery CMD] "
      "[mpirun options] -- herd "
      "train CONFIG "
      "[train options]. Runs mpirun --oversubscribe -np N ... herd train ..., restarts it from the newest "
      "checkpoint that verifies after a failure (at most K times; K defaults to the config's "
      "fault.max_restarts), forwards SIGTERM/SIGINT/SIGUSR1, and prints the effective training time (ETT). "
      "--elastic: after ranks are lost for good, restart on the survivors at a re-planned layout. "
      "--host-discovery CMD: before every attempt, CMD prints the usable hosts (host[:slots] per line); mpirun "
      "gets them, and with --elastic the job shrinks to the slots they hold and grows back to its own layout "
      "when they return. "
      "See docs/reliability.md.");
  return {app, [app] { return run_launch(app->remaining()); }};
}

}  // namespace herd::cli
