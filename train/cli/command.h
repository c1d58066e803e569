// The subcommands of the `lat` tool. Each lives in its own file train/cli/<name>.cpp and
// defines one `Command add_<name>_command(CLI::App& app)`, declared here and listed in
// main.cpp: it registers its options on a sub-app of `app` and returns what to run when
// that sub-app was chosen.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace lat::cli {

/// A registered subcommand. `run` is called after parsing succeeded and the subcommand
/// was chosen; it returns the exit code (0 success) and throws lat::Error for a failure
/// while running (exit 1).
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

}  // namespace lat::cli
