// herd's entry point; everything lives in herd/cli/app.cpp and one file per subcommand.
#include "herd/cli/app.h"

int main(int argc, char** argv) { return herd::cli::run_cli(argc, argv); }
