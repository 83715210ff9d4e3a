// Preemption: SIGTERM or SIGUSR1 (how a scheduler preempts a job, or asks it to save and leave) sets a
// process-wide flag; the trainer reads it at every step boundary, the ranks agree on it in their
// per-step control all-reduce (so every rank stops after the same step, whichever of them saw the
// signal, or got it: mpirun forwards it to every rank, a one-rank signal spreads through the
// all-reduce), write a checkpoint and `herd train` exits with code 143 (128 + SIGTERM). The handler only
// stores to a lock-free atomic (async-signal-safe); all the work happens on the training threads.
#pragma once

namespace herd::train {

// Installs the SIGTERM and SIGUSR1 handlers (sigaction; idempotent).
void install_preemption_handlers();
// Whether a preemption was requested (by a signal or request_preemption) and not cleared since.
bool preemption_requested();
// The same as receiving SIGTERM (tests), and clearing it (tests; a new job in the same process).
void request_preemption();
void clear_preemption();

// The exit code of a job that stopped because it was preempted.
inline constexpr int kPreemptedExitCode = 143;

}  // namespace herd::train
