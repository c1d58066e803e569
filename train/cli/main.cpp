// The `lat` command-line tool (DESIGN.md, "The command line"). Exit codes: 0 success,
// 1 failure while running, 2 bad usage or config. Errors go to stderr as one line
// starting "error: "; stdout carries only what a command outputs.
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "lat/lat.h"
#include "train/cli/command.h"
#include "train/config/config.h"
#include "train/distributed/distributed.h"
#include "train/run/wait_policy.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// One line: CLI11 messages can span lines.
std::string one_line(std::string message) {
  for (char& c : message)
    if (c == '\n') c = ' ';
  return message;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lat: train small hybrid linear-attention language models", "lat"};
  app.set_version_flag("--version", std::string("lat ") + lat::version());
  app.require_subcommand(0, 1);
  app.footer("Run `lat COMMAND --help` for a command's options. Exit codes: 0 success, 1 failure while running, "
             "2 bad usage or config.");

  // Each subcommand registers itself here (train/cli/command.h).
  std::vector<lat::cli::Command> commands;
  commands.push_back(lat::cli::add_train_command(app));
  commands.push_back(lat::cli::add_generate_command(app));
  commands.push_back(lat::cli::add_eval_command(app));
  commands.push_back(lat::cli::add_export_command(app));
  commands.push_back(lat::cli::add_info_command(app));
  commands.push_back(lat::cli::add_plot_command(app));
  commands.push_back(lat::cli::add_tokenizer_command(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << one_line(e.what()) << " (see lat --help)\n";
    return kExitUsage;
  }

  try {
    for (const lat::cli::Command& command : commands) {
      if (!command.app->parsed()) continue;
      // Training meets at OpenMP barriers hundreds of times a step, eval and generate every
      // layer of every token: the wait policy must suit the machine's load, and is chosen
      // before any OpenMP work (this may restart lat; the run's banner says what was chosen).
      const std::string name = command.app->get_name();
      if (name == "train" || name == "eval" || name == "generate") lat::choose_wait_policy(argv);
      const int code = command.run();
      // A generated text or an eval result that could not be written (a full disk, a closed
      // pipe with SIGPIPE ignored) is a failure, not a success with nothing to show.
      std::cout.flush();
      if (!std::cout) {
        std::cerr << "error: cannot write to standard output: " << std::strerror(errno) << "\n";
        return kExitFailure;
      }
      return code;
    }
    std::cout << app.help();
    return 0;
  } catch (const lat::ConfigError& e) {
    // Under mpirun every rank usually reads the same config and fails the same way: rank 0
    // prints at once; the others wait a moment, in which the launcher (which ends the job at
    // the first non-zero exit) normally stops them, and print only an error of their own.
    const int rank = lat::launcher_rank();
    if (rank == 0) {
      std::cerr << "error: " << one_line(e.what()) << "\n";
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::cerr << "error: rank " << rank << ": " << one_line(e.what()) << "\n";
    }
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "error: " << one_line(e.what()) << "\n";
    return kExitFailure;
  }
}
