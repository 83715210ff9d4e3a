// Injected faults fire once per job. A job restarted from its checkpoints (by the supervisor, or by hand
// with the same checkpoint.dir) reaches the step of an injected kill again; without a record it would die
// there forever. The rank that fires a fault appends its key ("kill@120" and the like) to
// <checkpoint.dir>/faults_fired.txt first (one short O_APPEND write, atomic among the ranks of one
// filesystem), and every injection point asks whether its key is already there. Without a checkpoint
// directory nothing persists and a restarted job starts over, faults included.
#pragma once

#include <string>

namespace herd::train {

// The file the keys go to, or "" when checkpoint_dir is empty.
std::string fault_log_path(const std::string& checkpoint_dir);
// Whether `key` fired earlier in this job (it is in the log).
bool fault_fired(const std::string& checkpoint_dir, const std::string& key);
// Records `key` as fired (creating the directory and the file when needed); best effort: a fault that
// cannot be recorded still fires.
void mark_fault_fired(const std::string& checkpoint_dir, const std::string& key);

}  // namespace herd::train
