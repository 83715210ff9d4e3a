// The herd command line: one subcommand per file (model.cpp, schedule.cpp, ...), registered in app.cpp.
//
// Contract for every subcommand: `--help` documents every option; an unknown option or a bad value is
// one line on stderr and exit status 2; a user error found while running (bad config file, impossible
// layout) is one line on stderr and exit status 1; results go to stdout.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "herd/core/error.h"

namespace herd::cli {

using Runner = std::function<int()>;

struct Subcommand {
  CLI::App* app;
  Runner run;
};

// Each subcommand file provides one of these; it adds its options to a new subcommand of `root`
// and returns the function that runs it once the command line has been parsed.
Subcommand add_model_command(CLI::App& root);
Subcommand add_estimate_command(CLI::App& root);
Subcommand add_plan_command(CLI::App& root);
Subcommand add_schedule_command(CLI::App& root);
Subcommand add_data_command(CLI::App& root);
Subcommand add_train_command(CLI::App& root);
Subcommand add_generate_command(CLI::App& root);
Subcommand add_convert_command(CLI::App& root);
Subcommand add_plot_command(CLI::App& root);
Subcommand add_calibrate_command(CLI::App& root);
Subcommand add_launch_command(CLI::App& root);
Subcommand add_trace_command(CLI::App& root);

// herd launch's own argument parsing (cli/launch.cpp): the arguments after "launch".
int run_launch(const std::vector<std::string>& args);

// The process's command line as run_cli received it (argv[0] included): what a supervisor reruns.
const std::vector<std::string>& command_line();

// Option validators. CLI11 prefixes the option's name, so a bad value reads as one short line such as
// "--top-p: must be a number from 0 to 1, got '1.5'" (bounds printed as written, never as 300 digits).
// The number validators reject nan and inf, and values beyond a double (1e400).
CLI::Validator positive_integer();
CLI::Validator positive_number();
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi);
CLI::Validator number_in(double lo, double hi);
// Any finite number; run_cli adds it to every floating-point option of every command.
CLI::Validator finite_number();

// Parses argv and runs the chosen subcommand; returns the process exit status.
int run_cli(int argc, const char* const* argv);

// Whether the command in argv runs herd's kernels in this process (train, generate, calibrate), and so
// should settle the libraries' load-time settings first (kernels/library_env.h). The planner's commands
// need neither the 50 ms load sample nor the re-execution; and `herd launch` must not settle: its ranks
// inherit its environment, and a spin budget chosen for the one launcher process would become theirs
// ("1 process x 2 threads" for two ranks of two threads on two cores, which must not spin).
bool runs_kernels(int argc, const char* const* argv);

// The command boundary: runs `run` and returns its exit status; an exception that escapes it (out of
// memory, or a defect: core/exception.h) is one line "herd <command>: error: ..." on stderr and status 1,
// never an abort. run_cli runs every command through it.
int run_guarded(const std::string& command, const std::function<int()>& run);

// Prints "herd <command>: error: <message>" on stderr and returns exit status 1.
int report_error(const std::string& command, const Error& error);

}  // namespace herd::cli
