// Running the built `lat` binary from a test (targets that use it depend on lat_cli).
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/test_files.h"

namespace lat::testing {

/// What `lat` printed and returned.
struct CliResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out, err;
};

/// Runs build/lat with `args` (shell words, quoted by the caller) through the shell, stdin
/// from `stdin_path`, stdout and stderr captured in the files `capture`/out and `capture`/err
/// (the directory must exist).
inline CliResult run_lat_captured(const std::string& args, const std::filesystem::path& capture,
                                  const std::string& stdin_path = "/dev/null") {
  const std::string command = std::string("'") + LAT_BINARY_DIR + "/lat' " + args + " <'" + stdin_path + "' >'" +
                              (capture / "out").string() + "' 2>'" + (capture / "err").string() + "'";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_bytes(capture / "out"), read_bytes(capture / "err")};
}

/// run_lat_captured's exit code; `out` gets stdout, and stderr after it when the code is not 0.
inline int run_lat(const std::string& args, std::string& out, const std::filesystem::path& capture) {
  const CliResult r = run_lat_captured(args, capture);
  out = r.exit_code == 0 ? r.out : r.out + r.err;
  return r.exit_code;
}

}  // namespace lat::testing
