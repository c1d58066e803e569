// The `lat` command-line tool. Exit codes: 0 success, 1 failure while running,
// 2 bad usage or config. Errors go to stderr as one line starting "error: ".
#include <iostream>

#include <CLI/CLI.hpp>

#include "lat/lat.h"

int main(int argc, char** argv) {
  CLI::App app{"lat: train small hybrid linear-attention language models", "lat"};
  app.set_version_flag("--version", std::string("lat ") + lat::version());
  app.require_subcommand(0, 1);
  app.footer("Subcommands arrive with the trainer: train, generate, eval, export, info.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  if (argc == 1) {
    std::cout << app.help();
    return 0;
  }
  try {
    return 0;
  } catch (const lat::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
