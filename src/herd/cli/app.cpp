#include "herd/cli/app.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "herd/core/aligned.h"
#include "herd/core/exception.h"
#include "herd/core/format.h"

namespace herd::cli {

int report_error(const std::string& command, const Error& error) {
  std::fprintf(stderr, "herd %s: error: %s\n", command.c_str(), error.message().c_str());
  return 1;
}

namespace {

// The whole string as an integer / a finite double; nullopt for anything else (trailing text, overflow,
// nan, inf, 1e400).
std::optional<std::int64_t> whole_integer(const std::string& v) {
  if (v.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end != v.c_str() + v.size()) return std::nullopt;
  return static_cast<std::int64_t>(n);
}

std::optional<double> whole_finite_number(const std::string& v) {
  if (v.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end != v.c_str() + v.size() || !std::isfinite(x) || (errno == ERANGE && std::fabs(x) > 1)) return std::nullopt;
  return x;
}

// A bound as a person writes it: 0.5, 1e+06, 100.
std::string short_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace

CLI::Validator positive_integer() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const std::optional<std::int64_t> n = whole_integer(v);
        if (n && *n > 0) return "";
        return "must be a positive integer, got '" + v + "'";
      },
      "POSITIVE");
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const std::optional<double> x = whole_finite_number(v);
        if (x && *x > 0) return "";
        return "must be a positive number, got '" + v + "'";
      },
      "POSITIVE");
}

CLI::Validator integer_in(std::int64_t lo, std::int64_t hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& v) -> std::string {
        const std::optional<std::int64_t> n = whole_integer(v);
        if (n && *n >= lo && *n <= hi) return "";
        return "must be an integer from " + range + ", got '" + v + "'";
      },
      "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

CLI::Validator number_in(double lo, double hi) {
  const std::string range = short_number(lo) + " to " + short_number(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& v) -> std::string {
        const std::optional<double> x = whole_finite_number(v);
        if (x && *x >= lo && *x <= hi) return "";
        return "must be a number from " + range + ", got '" + v + "'";
      },
      "[" + short_number(lo) + ", " + short_number(hi) + "]");
}

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (whole_finite_number(v)) return "";
        return "must be a finite number, got '" + v + "'";
      },
      "");
}

namespace {
std::vector<std::string> g_command_line;
}  // namespace

const std::vector<std::string>& command_line() { return g_command_line; }

namespace {

// Every floating-point option (CLI11 names their type FLOAT) of `app` and its subcommands gets
// finite_number(), so nan, inf and 1e400 are refused whatever else the option checks.
void require_finite_floats(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_name().rfind("FLOAT", 0) == 0) opt->check(finite_number());
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) require_finite_floats(*sub);
}

// CLI11's own messages for a missing or malformed option are already one line; we add where to look.
int report_parse_error(const CLI::App& root, const CLI::ParseError& e) {
  std::string where = "herd";
  for (const CLI::App* sub : root.get_subcommands()) where += " " + sub->get_name();
  std::string msg = e.what();
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  std::fprintf(stderr, "%s: error: %s; see '%s --help'\n", where.c_str(), msg.c_str(), where.c_str());
  return 2;
}

}  // namespace

bool runs_kernels(int argc, const char* const* argv) {
  if (argc < 2) return false;
  const std::string command = argv[1];
  return command == "train" || command == "generate" || command == "calibrate";
}

int run_guarded(const std::string& command, const std::function<int()>& run) {
  const std::string where = command.empty() ? "herd" : "herd " + command;
  try {
    return run();
  } catch (const std::bad_alloc& e) {
    // Memory a command could not get outside a training rank (the launcher reports those with the
    // planner's estimate).
    std::string asked = "an allocation failed";
    if (const auto* failed = dynamic_cast<const AllocationFailed*>(&e)) {
      asked = "an allocation of " + format_bytes(static_cast<double>(failed->bytes())) + " (" +
              std::to_string(failed->bytes()) + " bytes) failed";
    }
    std::fprintf(stderr, "%s: error: out of memory: %s; use a smaller model, batch, sequence or input\n", where.c_str(),
                 asked.c_str());
  } catch (...) {
    std::fprintf(stderr, "%s: error: %s\n", where.c_str(), current_exception_message().c_str());
  }
  return 1;
}

int run_cli(int argc, const char* const* argv) {
  CLI::App root{
      "herd: train Llama 3 models with 4D parallelism (TP, CP, PP, FSDP) and plan such runs.\n"
      "Run 'herd <command> --help' for the options of one command."};
  root.name("herd");
  root.require_subcommand(1);
  root.set_version_flag("--version", std::string("herd ") + HERD_VERSION);
  root.footer("Documentation: README.md and docs/ in the herd repository.");

  g_command_line.assign(argv, argv + argc);
  std::vector<Subcommand> subs;
  subs.push_back(add_model_command(root));
  subs.push_back(add_estimate_command(root));
  subs.push_back(add_plan_command(root));
  subs.push_back(add_schedule_command(root));
  subs.push_back(add_data_command(root));
  subs.push_back(add_train_command(root));
  subs.push_back(add_generate_command(root));
  subs.push_back(add_convert_command(root));
  subs.push_back(add_plot_command(root));
  subs.push_back(add_calibrate_command(root));
  subs.push_back(add_launch_command(root));
  subs.push_back(add_trace_command(root));

  require_finite_floats(root);

  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    std::string known;
    bool found = false;
    for (const Subcommand& s : subs) {
      found = found || s.app->get_name() == name;
      known += (known.empty() ? "" : ", ") + s.app->get_name();
    }
    if (!found) {
      std::fprintf(stderr, "herd: error: unknown command '%s'; commands: %s (see 'herd --help')\n", name.c_str(),
                   known.c_str());
      return 2;
    }
  }
  // herd launch passes mpirun's options through as they are ("-np 4", "--bind-to none", then "-- herd
  // train ..."), which no option parser should reinterpret: it reads its own arguments (cli/launch.cpp).
  if (argc > 2 && std::string(argv[1]) == "launch" && std::string(argv[2]) != "--help" &&
      std::string(argv[2]) != "-h") {
    return run_guarded("launch", [&] { return run_launch(std::vector<std::string>(argv + 2, argv + argc)); });
  }
  try {
    root.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return root.exit(e);
  } catch (const CLI::ParseError& e) {
    if (argc <= 1) {
      std::cout << root.help();
      return 2;
    }
    return report_parse_error(root, e);
  } catch (...) {
    // An option's own callback or validator that threw something else: the command named on the line.
    const std::string command = argc > 1 && argv[1][0] != '-' ? argv[1] : "";
    return run_guarded(command, []() -> int { throw; });
  }
  for (const Subcommand& s : subs) {
    if (!s.app->parsed()) continue;
    return run_guarded(s.app->get_name(), s.run);
  }
  std::cout << root.help();
  return 2;
}

}  // namespace herd::cli
