// Which machine this is, and what else was running on it: the identity and the load that `herd
// calibrate` records beside its measurements (a calibration belongs to one host and CPU model, and is
// only as good as the quiet it was taken in). Linux only; readers give "" or empty where /proc is
// unreadable.
#pragma once

#include <string>
#include <vector>

namespace herd::measure {

// gethostname(); "" when it fails.
std::string host_name();

// The CPU's model name (/proc/cpuinfo "model name", the first one); "" where unknown.
std::string cpu_model();

// /proc/loadavg as it reads ("1.27 1.09 1.37 3/412 8812"); "" where unreadable.
std::string loadavg_text();

// Other processes with a runnable thread right now, as "name (pid)", for the record of what ran beside
// a measurement. Kernel threads count too when runnable.
std::vector<std::string> runnable_processes();

}  // namespace herd::measure
