// Preemption: SIGTERM or SIGUSR1 (how a scheduler preempts a job, or asks it to save and leave) and
// SIGINT (Ctrl-C) set a process-wide flag; the trainer reads it at every step boundary, the ranks agree
// on it in their per-step control all-reduce (so every rank stops after the same step, whichever of
// them saw the signal, or got it: mpirun forwards it to every rank, a one-rank signal spreads through
// the all-reduce), write a checkpoint and `herd train` exits with code 143 (128 + SIGTERM), or 130
// (128 + SIGINT) when SIGINT came first. A second SIGINT ends the process at once, as SIGINT's default
// does. The handler only stores to lock-free atomics (async-signal-safe); all the work happens on the
// training threads.
#pragma once

namespace herd::train {

// Installs the SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 handlers (sigaction; idempotent).
void install_preemption_handlers();
// Whether a preemption was requested (by a signal or request_preemption) and not cleared since.
bool preemption_requested();
// The same as receiving SIGTERM (tests), and clearing it (tests; a new job in the same process).
void request_preemption();
void clear_preemption();

// Dump requests: SIGUSR1 (with the preemption above) and SIGUSR2 (alone: the job trains on) ask for every
// rank's flight recorder to be dumped now, hung or not. The handler counts them; the watchdog thread, which
// polls every 0.1 s, does the dumping (train/job/watchdog.h). dump_requests() is the count so far and
// last_dump_signal() the signal of the newest ("SIGUSR1", "SIGUSR2" or "request" for request_dump()).
unsigned dump_requests();
const char* last_dump_signal();
void request_dump();  // as SIGUSR2 (tests)

// The exit code of a job that stopped because it was preempted, or interrupted by SIGINT.
inline constexpr int kPreemptedExitCode = 143;
inline constexpr int kInterruptedExitCode = 130;
// kInterruptedExitCode when the first stop request was SIGINT, else kPreemptedExitCode.
int preemption_exit_code();

}  // namespace herd::train
