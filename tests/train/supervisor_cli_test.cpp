// Supervision as a user runs it: `herd train --max-restarts K` with ranks as threads (and `herd launch`
// around mpirun). An injected kill, a hang, a kill every few steps and a corrupt newest checkpoint each
// restart and finish with the same losses and byte-identical final weights (the shard files of the last
// checkpoint) as the uninterrupted run; the watchdog ends a stalled job within timeout + 5 s; exhausted
// restarts end in a summary and a non-zero exit; the ETT record closes the metrics file and its parts
// add up to the wall time; SIGTERM is forwarded and the job is not restarted.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "cli/cli_runner.h"
#include "herd/data/shard.h"
#include "herd/train/checkpoint/checkpoint.h"
#include "train/dist_harness.h"
#include "train/parity_run_dir.h"

namespace herd::train {
namespace {

namespace fs = std::filesystem;

struct Metrics {
  std::map<std::int64_t, double> loss;  // step -> loss (each step once)
  std::vector<Json> steps;              // step records in file order
  Json last;                            // the last record
  int duplicates = 0;
};

// The state letter of a process (R, S, Z, ...), or 0 when it does not exist.
char process_state(pid_t pid) {
  const std::string stat = herd::testing::slurp("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

// Every process below `root` (its children, their children, ...).
std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const std::string stat = herd::testing::slurp(e.path().string() + "/stat");
    const std::size_t close = stat.rfind(')');
    char state = 0;
    long ppid = 0;
    if (close == std::string::npos || std::sscanf(stat.c_str() + close + 1, " %c %ld", &state, &ppid) != 2) continue;
    children.emplace(static_cast<pid_t>(ppid), static_cast<pid_t>(std::stol(name)));
  }
  std::vector<pid_t> out, todo = {root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

// Those of `pids` still running (a zombie is not) after waiting up to `seconds` for them to end.
std::vector<pid_t> survivors(std::vector<pid_t> pids, int seconds) {
  for (int i = 0; i < seconds * 20 && !pids.empty(); ++i) {
    std::erase_if(pids, [](pid_t p) {
      const char st = process_state(p);
      return st == 0 || st == 'Z' || st == 'X';
    });
    if (!pids.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pids;
}

class Supervisor : public herd::testing::ParityRunDir {
 protected:
  Supervisor() : ParityRunDir("herd_sup_cli") {}

  // `herd launch -np 2 -- herd train ...` of run `name` with `extra` flags, its output in `log`; the exit
  // status. OpenMPI's own allocations outlive MPI_Finalize; under LeakSanitizer they would fail the run.
  int launch(const std::string& name, const std::string& extra, const std::string& log, int steps = 8) {
    return std::system((launch_command(name, extra, steps) + " > " + log + " 2>&1").c_str());
  }
  std::string launch_command(const std::string& name, const std::string& extra, int steps = 8) {
    return "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 " + std::string(HERD_BINARY) +
           " launch -np 2 --bind-to none -- herd " + args(name, steps) + " " + extra;
  }

  // A run of `steps` steps of the parity model checkpointing every 2 steps under dir_/name.
  std::string args(const std::string& name, int steps = 8, const std::string& layout = "--dp 2") {
    return "train " + data_and_model() +
           " --data.seq_len=16 --train.global_batch=8 --parallel.microbatch_size=2 --train.steps=" +
           std::to_string(steps) +
           " --optim.lr=1e-2 --eval.every=0 --generate.samples=0 --checkpoint.every=2 --checkpoint.keep=3"
           " --fault.restart_backoff_s=0.05 --checkpoint.dir=" +
           (dir_ / name).string() + " --train.metrics_file=" + metrics_path(name) + " " + layout;
  }
  std::string metrics_path(const std::string& name) { return (dir_ / (name + ".jsonl")).string(); }

  Metrics metrics(const std::string& name) {
    Metrics m;
    std::ifstream in(metrics_path(name));
    for (std::string line; std::getline(in, line);) {
      const Json j = Json::parse(line);
      m.last = j;
      if (!j.contains("step")) continue;
      m.steps.push_back(j);
      const auto step = j["step"].get<std::int64_t>();
      m.duplicates += m.loss.count(step) ? 1 : 0;
      m.loss[step] = j["loss"].get<double>();
    }
    return m;
  }

  // The final checkpoint's shards, byte for byte, and the losses: the run `name` is the run `ref`.
  void expect_identical(const std::string& ref, const std::string& name, int steps = 8) {
    const Metrics a = metrics(ref), b = metrics(name);
    ASSERT_EQ(a.loss.size(), static_cast<std::size_t>(steps));
    ASSERT_EQ(b.loss.size(), a.loss.size());
    EXPECT_EQ(b.duplicates, 0);
    for (const auto& [step, loss] : a.loss) EXPECT_EQ(b.loss.at(step), loss) << "step " << step;
    char last[32];
    std::snprintf(last, sizeof last, "step_%08d", steps);
    int shards = 0;
    for (const auto& e : fs::directory_iterator(dir_ / ref / last)) {
      if (e.path().extension() != ".bin") continue;
      ++shards;
      const std::string other = (dir_ / name / last / e.path().filename()).string();
      EXPECT_TRUE(herd::testing::slurp(other) == herd::testing::slurp(e.path().string())) << other << " differs";
    }
    EXPECT_GT(shards, 0);
  }

  // Starts `command` (shell syntax) in the background as its own process; its pid.
  static pid_t start(const std::string& command) { return herd::testing::spawn_shell("exec " + command); }

  // Kills `pid` (the supervisor) with SIGKILL, reaps it, and expects none of `job`, the processes it had
  // started, to outlive it (each polled for up to 30 s; any left are killed so they do not outlive the test).
  static void expect_job_dies_with_supervisor(pid_t pid, const std::vector<pid_t>& job, const std::string& who) {
    ::kill(pid, SIGKILL);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    const std::vector<pid_t> left = survivors(job, 30);
    for (pid_t p : left) ::kill(p, SIGKILL);
    EXPECT_TRUE(left.empty()) << left.size() << " of the job's " << job.size() << " processes outlived " << who;
  }

  // Waits (up to 2 minutes) for `text` in the file `path`; whether it came.
  static bool wait_for_text(const std::string& path, const std::string& text) {
    for (int i = 0; i < 2400; ++i) {
      if (herd::testing::slurp(path).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Waits (up to 2 minutes) for run `name`'s first step record; whether one came.
  bool wait_for_a_step(const std::string& name) {
    for (int i = 0; i < 2400; ++i) {
      if (herd::testing::slurp(metrics_path(name)).find("\"step\"") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // The ETT record is the last one, and its parts add up to no more than the wall time.
  void expect_ett(const Metrics& m, std::int64_t restarts) {
    const Json& s = m.last;
    ASSERT_TRUE(s.contains("ett")) << s.dump();
    EXPECT_EQ(s["restarts"].get<std::int64_t>(), restarts);
    double sum = 0;
    for (const char* k : {"productive_s", "lost_s", "restart_s", "startup_s", "checkpoint_s", "backoff_s", "other_s"}) {
      EXPECT_GE(s[k].get<double>(), 0.0) << k;
      sum += s[k].get<double>();
    }
    EXPECT_LE(sum, s["wall_s"].get<double>() * (1 + 1e-9) + 1e-9) << s.dump();
    EXPECT_NEAR(sum, s["wall_s"].get<double>(), 1e-6) << s.dump();
    EXPECT_GT(s["ett"].get<double>(), 0.0);
    EXPECT_LE(s["ett"].get<double>(), 1.0);
    EXPECT_NEAR(s["ett"].get<double>(), s["productive_s"].get<double>() / s["wall_s"].get<double>(), 1e-12);
    if (restarts > 0) {
      EXPECT_GT(s["restart_s"].get<double>(), 0.0);
    }
  }
};

TEST_F(Supervisor, AKilledRankRestartsAndFinishesBitIdentical) {
  auto r = herd::testing::run_herd(args("ref"));
  ASSERT_EQ(r.status, 0) << r.err;
  // Killed at the start of step 6: step 5 is done, the newest checkpoint is step 4, so step 5 is redone.
  r = herd::testing::run_herd(args("kill") + " --max-restarts 2 --fault.kill_rank=1 --fault.kill_step=6");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("attempt 0 failed: exit status 1; failed rank(s): 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ETT"), std::string::npos);
  expect_identical("ref", "kill");
  const Metrics m = metrics("kill");
  expect_ett(m, 1);
  EXPECT_EQ(m.last["redone_steps"].get<std::int64_t>(), 1);
  EXPECT_GT(m.last["lost_s"].get<double>(), 0.0);
  for (const Json& j : m.steps) EXPECT_EQ(j.value("redone", false), j["step"] == 5) << j.dump();
}

TEST_F(Supervisor, AHungRankIsEndedByTheWatchdogAndTheJobRestarts) {
  auto r = herd::testing::run_herd(args("ref"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = herd::testing::run_herd(args("hang") +
                              " --max-restarts 1 --parallel.comm_timeout_s=2 --fault.hang_rank=1 --fault.hang_step=5 "
                              "--fault.hang_seconds=300");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("attempt 0 failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("flight recorders: 2 dump(s)"), std::string::npos) << r.err;
  // The dumps read across ranks name the hung rank, not rank 0 that timed out waiting for it.
  EXPECT_NE(r.err.find("herd trace: culprit rank 1 (outside communication"), std::string::npos) << r.err;
  expect_identical("ref", "hang");
  expect_ett(metrics("hang"), 1);
}

// The rank hangs 300 s: the job ends in a fraction of that (timeout + 5 s on an idle host), by the
// watchdog, which says so. The bound only tells the watchdog's end from the hang's, so a loaded host
// cannot decide it.
constexpr double kFarUnderTheHang = 150;

TEST_F(Supervisor, TheWatchdogEndsAStalledJob) {
  // Two ranks (a peer times out in a collective) and one rank (no collective waits: the heartbeat).
  for (const std::string layout : {"--dp 2", "--dp 1"}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = herd::testing::run_herd(args("stall", 8, layout) +
                                     " --parallel.comm_timeout_s=3 --fault.hang_rank=0 --fault.hang_step=2 "
                                     "--fault.hang_seconds=300 --diagnostics.dir=" +
                                     (dir_ / "dumps").string());
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.status, 1) << layout << "\n" << r.err;
    EXPECT_LT(wall, kFarUnderTheHang) << layout;
    EXPECT_NE(r.err.find("rank(s) 0 did not return"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::is_empty(dir_ / "dumps")) << layout;
    fs::remove_all(dir_ / "stall");
    fs::remove_all(dir_ / "dumps");
  }
}

TEST_F(Supervisor, KillEveryFewStepsRestartsEachTimeAndFinishesBitIdentical) {
  auto r = herd::testing::run_herd(args("ref", 12));
  ASSERT_EQ(r.status, 0) << r.err;
  r = herd::testing::run_herd(args("every", 12) + " --max-restarts 5 --fault.kill_every=5 --fault.seed=7");
  ASSERT_EQ(r.status, 0) << r.err;
  expect_identical("ref", "every", 12);
  const Metrics m = metrics("every");
  expect_ett(m, 2);  // steps 5 and 10
  // Killed at the start of 5 (checkpoint 4: nothing redone) and of 10 (checkpoint 8: step 9 redone).
  EXPECT_EQ(m.last["redone_steps"].get<std::int64_t>(), 1);
}

TEST_F(Supervisor, ACorruptNewestCheckpointFallsBackToThePreviousOne) {
  auto r = herd::testing::run_herd(args("ref", 8, "--dp 1"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = herd::testing::run_herd(
      args("corrupt", 8, "--dp 1") +
      " --max-restarts 1 --fault.kill_rank=0 --fault.kill_step=7 --fault.corrupt_checkpoint=true");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("flipped a byte"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("checksum mismatch"), std::string::npos) << r.err;  // the fallback's warning
  expect_identical("ref", "corrupt");
  const Metrics m = metrics("corrupt");
  expect_ett(m, 1);
  EXPECT_EQ(m.last["redone_steps"].get<std::int64_t>(), 2);  // steps 5 and 6, from the checkpoint at 4
}

// fault.slow_rank through the CLI: announced from its step, the run completes. How much longer the slowed
// steps take is asserted on a step clock the test controls (StragglerWatch in straggler_test.cpp: the
// rank's clock is asked for (factor - 1) x its compute from that step); the wall time it costs on this
// host is not a test's to judge.
TEST_F(Supervisor, ASlowRankIsAnnouncedFromItsStepAndTheRunCompletes) {
  auto r = herd::testing::run_herd(args("slow", 8, "--dp 1") +
                                   " --fault.slow_rank=0 --fault.slow_factor=2 --fault.slow_from_step=5");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("fault.slow_rank: rank 0's steps take 2 x longer from step 5"), std::string::npos) << r.err;
  EXPECT_EQ(metrics("slow").steps.size(), 8u);
}

TEST_F(Supervisor, ExhaustedRestartsStopWithASummaryAndANonZeroExit) {
  auto r = herd::testing::run_herd(args("exhaust") + " --max-restarts 1 --fault.kill_every=1");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("giving up: 1 restart(s) used"), std::string::npos) << r.err;
  const std::string tail = r.err.substr(r.err.rfind("herd supervisor:"));
  EXPECT_NE(tail.find("ETT"), std::string::npos) << tail;
  const Metrics m = metrics("exhaust");
  EXPECT_EQ(m.last["restarts"].get<std::int64_t>(), 1);
  EXPECT_EQ(m.last["exit"].get<int>(), 1);
}

TEST_F(Supervisor, SigtermIsForwardedAndTheJobIsNotRestarted) {
  const std::string err = (dir_ / "term.err").string();
  const std::string cmd =
      "exec " + std::string(HERD_BINARY) + " " + args("term", 100000) + " --max-restarts 3 2>" + err;
  const pid_t pid = herd::testing::spawn_shell(cmd);
  ASSERT_GT(pid, 0);
  // Wait for the first step record, then preempt.
  for (int i = 0; i < 600 && metrics("term").steps.empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(metrics("term").steps.empty()) << herd::testing::slurp(err);
  ::kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << herd::testing::slurp(err);
  EXPECT_EQ(WEXITSTATUS(st), 143) << herd::testing::slurp(err);
  const std::string log = herd::testing::slurp(err);
  EXPECT_NE(log.find("preempted, not restarted"), std::string::npos) << log;
  EXPECT_EQ(log.find("attempt 1"), std::string::npos) << log;
  EXPECT_TRUE(metrics("term").last.contains("ett"));
}

// A job owns its checkpoint.dir (train/checkpoint/checkpoint_lock.h): here the supervisor of herd train
// --max-restarts holds it and its child trains under it. A second job on the directory is refused with
// one line naming the holder, before it writes anything (no metrics file, the first job goes on); once
// the holder has ended, the directory is free.
TEST_F(Supervisor, ASecondJobOnAnOwnedCheckpointDirIsRefusedNamingTheHolder) {
  const std::string err = (dir_ / "own.err").string();
  const pid_t pid =
      start(std::string(HERD_BINARY) + " " + args("own", 100000) + " --max-restarts 1 >/dev/null 2>" + err);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_a_step("own")) << herd::testing::slurp(err);
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  auto r = herd::testing::run_herd(args("own", 8) + " --train.metrics_file=" + metrics_path("second"));
  EXPECT_EQ(r.status, 1) << r.err;
  // One line; under ranks as threads the trainer's errors name the rank that reports them.
  const std::size_t at = r.err.find("herd train: error: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
  EXPECT_NE(line.find("checkpoint.dir '" + (dir_ / "own").string() + "' is in use by herd train pid " +
                      std::to_string(pid) + " on host " + host + " since "),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("Z; stop that job or choose another checkpoint.dir"), std::string::npos) << line;
  EXPECT_EQ(r.err.find("removed"), std::string::npos) << r.err;  // no unfinished save of the first job
  EXPECT_FALSE(fs::exists(metrics_path("second")));
  int st = 0;
  EXPECT_EQ(::waitpid(pid, &st, WNOHANG), 0) << "the first job ended: " << herd::testing::slurp(err);
  ::kill(pid, SIGTERM);
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 143) << herd::testing::slurp(err);
  r = herd::testing::run_herd(args("own", 2) +
                              " --checkpoint.resume=false --train.metrics_file=" + metrics_path("third"));
  EXPECT_EQ(r.status, 0) << r.err;
}

// A job that is quiet for a while (a long step, here rank 1 stopped by fault.hang_rank with the
// collectives' timeout far away), so that no write into the dead supervisor's pipe ends it.
const char* const kQuietJob =
    " --fault.hang_rank=1 --fault.hang_step=3 --fault.hang_seconds=300 --parallel.comm_timeout_s=600";

// The supervisor's children die with it, however it ends: after kill -9 of herd train --max-restarts no
// process of its job is left running (polled for up to 30 s).
TEST_F(Supervisor, Kill9OfTheSupervisorLeavesNoProcessOfItsJob) {
  const std::string err = (dir_ / "orphan.err").string();
  const pid_t pid = start(std::string(HERD_BINARY) + " " + args("orphan", 100000) + kQuietJob +
                          " --max-restarts 1 >/dev/null 2>" + err);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(err, "fault.hang_rank: rank 1 stops")) << herd::testing::slurp(err);
  const std::vector<pid_t> job = descendants(pid);
  ASSERT_FALSE(job.empty());
  expect_job_dies_with_supervisor(pid, job, "the supervisor");
}

// Ctrl-C on a supervised job: the supervisor forwards SIGINT, the child checkpoints the step in
// progress and exits 130, the supervisor does not restart it and exits 130; a new run resumes from
// that checkpoint.
TEST_F(Supervisor, SigintIsForwardedTheChildCheckpointsAndTheJobIsNotRestarted) {
  const std::string err = (dir_ / "int.err").string();
  const std::string cmd = "exec " + std::string(HERD_BINARY) + " " + args("int", 100000) +
                          " --checkpoint.every=100000 --max-restarts 3 2>" + err;
  const pid_t pid = herd::testing::spawn_shell(cmd);
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 600 && metrics("int").steps.size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(metrics("int").steps.size(), 3u) << herd::testing::slurp(err);
  ::kill(pid, SIGINT);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  const std::string log = herd::testing::slurp(err);
  ASSERT_TRUE(WIFEXITED(st)) << "ended by signal " << WTERMSIG(st) << "\n" << log;
  EXPECT_EQ(WEXITSTATUS(st), 130) << log;
  EXPECT_NE(log.find("exit code 130"), std::string::npos) << log;
  EXPECT_NE(log.find("preempted, not restarted"), std::string::npos) << log;
  EXPECT_EQ(log.find("attempt 1"), std::string::npos) << log;
  const Metrics m = metrics("int");
  ASSERT_TRUE(m.last.contains("ett")) << m.last.dump();
  EXPECT_EQ(m.last["exit"].get<int>(), 130);
  EXPECT_EQ(m.last["lost_s"].get<double>(), 0.0);
  const std::int64_t stopped = m.loss.rbegin()->first;
  const std::vector<std::string> saved = list_checkpoints((dir_ / "int").string());
  ASSERT_EQ(saved.size(), 1u) << log;
  EXPECT_EQ(fs::path(saved[0]).filename().string(), step_dir_name(stopped));

  const herd::testing::CliResult resumed =
      herd::testing::run_herd(args("int", static_cast<int>(stopped) + 2) + " --max-restarts 3");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resumed from " + saved[0] + " (step " + std::to_string(stopped)), std::string::npos)
      << resumed.err;
  const Metrics r = metrics("int");
  EXPECT_EQ(r.duplicates, 0);
  EXPECT_EQ(r.loss.size(), static_cast<std::size_t>(stopped + 2));
}

TEST_F(Supervisor, HerdLaunchRefusesBadCommandsWithTheFix) {
  auto r = herd::testing::run_herd("launch -- herd train");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("-np: give the number of ranks"), std::string::npos) << r.err;
  r = herd::testing::run_herd("launch -np 2 -- herd model");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("after --, give the training command"), std::string::npos) << r.err;
  r = herd::testing::run_herd("launch -np 2 -- herd train --optim.lr=-1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("optim.lr: must be positive"), std::string::npos) << r.err;
}

#if HERD_HAVE_MPI
TEST_F(Supervisor, HerdLaunchRestartsAKilledMpiRankBitIdentical) {
  const std::string log = (dir_ / "launch.log").string();
  // The reference is the uninterrupted MPI run (MPI's and the threads' BLAS need not agree bit for bit).
  ASSERT_EQ(launch("mpiref", "", log), 0) << herd::testing::slurp(log);
  ASSERT_EQ(launch("mpi", "--max-restarts 2 --fault.kill_rank=1 --fault.kill_step=6", log), 0)
      << herd::testing::slurp(log);
  const std::string err = herd::testing::slurp(log);
  EXPECT_NE(err.find("attempt 0 failed"), std::string::npos) << err;
  EXPECT_NE(err.find("failed rank(s): 1"), std::string::npos) << err;
  expect_identical("mpiref", "mpi");
  expect_ett(metrics("mpi"), 1);
}

// Preemption under MPI: SIGTERM to herd launch reaches every rank through mpirun; the ranks agree on a
// step, checkpoint it and exit 143, which herd launch does not restart; the checkpoint resumes bit-exactly.
TEST_F(Supervisor, HerdLaunchSigtermCheckpointsAndResumesBitIdentical) {
  const std::string log = (dir_ / "launch.log").string();
  ASSERT_EQ(launch("mpiref", "", log, 150), 0) << herd::testing::slurp(log);
  const std::string metrics = metrics_path("mpicut");
  const std::string status = (dir_ / "status").string();
  // The interrupted run's steps are stretched (fault.slow_rank computes 50x as long), so the signal
  // lands long before its last step however fast the machine is.
  const std::string cmd = "sh -c '" + launch_command("mpicut", "--fault.slow_rank=0 --fault.slow_factor=50", 150) +
                          " >" + log + " 2>&1 & p=$!; i=0; while [ $i -lt 3000 ] && [ \"$(cat " + metrics +
                          " 2>/dev/null | wc -l)\" -lt 3 ]; do sleep 0.01; i=$((i+1)); done; kill -TERM $p; wait $p; " +
                          "echo $? >" + status + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string out = herd::testing::slurp(log);
  ASSERT_EQ(std::atoi(herd::testing::slurp(status).c_str()), 143) << out;
  EXPECT_NE(out.find("preempted, not restarted"), std::string::npos) << out;
  const std::vector<std::string> saved = list_checkpoints((dir_ / "mpicut").string());
  ASSERT_FALSE(saved.empty()) << out;
  ASSERT_NE(fs::path(saved.front()).filename().string(), step_dir_name(150)) << "the run ended before the signal";
  ASSERT_EQ(launch("mpicut", "", log, 150), 0) << herd::testing::slurp(log);
  expect_identical("mpiref", "mpicut", 150);
}

// A rank hung in MPI: its peer's collective times out and aborts mpirun; herd launch restarts the job.
TEST_F(Supervisor, HerdLaunchRestartsAHungMpiJobBitIdentical) {
  const std::string log = (dir_ / "launch.log").string();
  ASSERT_EQ(launch("mpiref", "", log), 0) << herd::testing::slurp(log);
  ASSERT_EQ(launch("mpihang",
                   "--max-restarts 1 --parallel.comm_timeout_s=2 --fault.hang_rank=1 --fault.hang_step=5 "
                   "--fault.hang_seconds=300",
                   log),
            0)
      << herd::testing::slurp(log);
  const std::string err = herd::testing::slurp(log);
  EXPECT_NE(err.find("attempt 0 failed"), std::string::npos) << err;
  EXPECT_NE(err.find("timeout after"), std::string::npos) << err;
  expect_identical("mpiref", "mpihang");
  expect_ett(metrics("mpihang"), 1);
}

// One MPI rank hung outside communication: no collective waits on it, so only its own heartbeat can
// catch it. The process dumps its recorder and exits, ended by its watchdog.
TEST_F(Supervisor, TheWatchdogEndsAStalledMpiRank) {
  const std::string log = (dir_ / "stall.log").string(), dumps = (dir_ / "dumps").string();
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 mpirun --allow-run-as-root --oversubscribe "
      "--bind-to none -np 1 " +
      std::string(HERD_BINARY) + " " + args("mpistall", 8, "--dp 1") +
      " --parallel.comm_timeout_s=3 --fault.hang_rank=0 --fault.hang_step=2 "
      "--fault.hang_seconds=300 --diagnostics.dir=" +
      dumps + " > " + log + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(wall, kFarUnderTheHang);
  const std::string err = herd::testing::slurp(log);
  EXPECT_NE(err.find("watchdog: rank 0 has shown no sign of life"), std::string::npos) << err;
  EXPECT_FALSE(fs::is_empty(dumps));
}

// kill -9 of herd launch ends mpirun and every rank (mpirun itself leaves its ranks running when it is
// killed): no process of the job is left running (polled for up to 30 s).
TEST_F(Supervisor, Kill9OfHerdLaunchLeavesNoMpirunOrRankRunning) {
  const std::string err = (dir_ / "mpiorphan.err").string();
  const pid_t pid = start("env " + launch_command("mpiorphan", kQuietJob, 100000) + " >/dev/null 2>" + err);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(err, "fault.hang_rank: rank 1 stops")) << herd::testing::slurp(err);
  const std::vector<pid_t> job = descendants(pid);
  ASSERT_GE(job.size(), 3u) << "mpirun and two ranks";
  expect_job_dies_with_supervisor(pid, job, "herd launch");
}

// Under a bare mpirun the supervisor cannot sit outside the job: --max-restarts says to use herd launch.
TEST_F(Supervisor, MaxRestartsUnderABareMpirunPointsToHerdLaunch) {
  const std::string log = (dir_ / "bare.log").string();
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 mpirun --allow-run-as-root --oversubscribe "
      "--bind-to none -np 1 " +
      std::string(HERD_BINARY) + " " + args("bare", 8, "--dp 1") + " --max-restarts 2 > " + log + " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string err = herd::testing::slurp(log);
  EXPECT_NE(err.find("run `herd launch -np N --max-restarts 2 -- herd train ...`"), std::string::npos) << err;
}
#endif

}  // namespace
}  // namespace herd::train
