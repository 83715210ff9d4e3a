#include "herd/cli/app.h"

#include <cstdio>
#include <iostream>

namespace herd::cli {

int report_error(const std::string& command, const Error& error) {
  std::fprintf(stderr, "herd %s: error: %s\n", command.c_str(), error.message().c_str());
  return 1;
}

CLI::Validator positive_integer() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          std::size_t used = 0;
          const long long n = std::stoll(v, &used);
          if (used == v.size() && n > 0) return "";
        } catch (const std::exception&) {
        }
        return "must be a positive integer, got '" + v + "'";
      },
      "POSITIVE");
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          std::size_t used = 0;
          const double x = std::stod(v, &used);
          if (used == v.size() && x > 0) return "";
        } catch (const std::exception&) {
        }
        return "must be a positive number, got '" + v + "'";
      },
      "POSITIVE");
}

namespace {
std::vector<std::string> g_command_line;
}  // namespace

const std::vector<std::string>& command_line() { return g_command_line; }

namespace {

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
  subs.push_back(add_plot_command(root));
  subs.push_back(add_calibrate_command(root));
  subs.push_back(add_launch_command(root));

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
    return run_launch(std::vector<std::string>(argv + 2, argv + argc));
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
  }
  for (const Subcommand& s : subs) {
    if (s.app->parsed()) return s.run();
  }
  std::cout << root.help();
  return 2;
}

}  // namespace herd::cli
