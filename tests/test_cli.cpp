// The `lat` binary's contract (DESIGN.md, "The command line"): --help and --version exit 0
// on stdout; bad usage exits 2 with one stderr line starting "error: ".
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "lat/version.h"

namespace {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs build/lat with `args` (shell words), capturing stdout and stderr separately.
Result run_lat(const std::string& args) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("lat_test_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string command = std::string("'") + LAT_BINARY_DIR + "/lat' " + args + " >'" +
                              (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
  const int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(dir / "out");
  r.err = read_file(dir / "err");
  std::filesystem::remove_all(dir);
  return r;
}

TEST(Cli, HelpExitsZero) {
  Result r = run_lat("--help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Usage: lat"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--version"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST(Cli, VersionExitsZero) {
  Result r = run_lat("--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("lat ") + LAT_VERSION + "\n");
}

TEST(Cli, UnknownOptionExitsTwoWithOneErrorLine) {
  Result r = run_lat("--no-such-option");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("--no-such-option"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(Cli, NegativeSeedExitsTwoNamingTheFlag) {
  // Checked while parsing, before the checkpoint is looked at.
  Result r = run_lat("generate --checkpoint no-such-run --seed -1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("error: --seed: expected an int in [0, 9223372036854775807], got -1", 0), 0u) << r.err;
}

TEST(Cli, LengthsAndCountsOutOfRangeExitTwoNamingTheFlag) {
  // Before anything is loaded or allocated: no sequence longer than data.block_size allows,
  // no count that runs for days, no huge number that saturates.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"eval --checkpoint no-such-run --task mqar --seq-len 2000000000", "error: --seq-len: expected an int in [1, 1048576]"},
      {"eval --checkpoint no-such-run --task mqar --samples 99999999999999", "error: --samples: expected an int in [1, 1000000]"},
      {"eval --checkpoint no-such-run --task mqar --samples 999999999999999999999", "error: --samples: expected an int in [1, 1000000], got 999999999999999999999"},
      {"generate --checkpoint no-such-run --max-new-tokens 99999999999999999999", "error: --max-new-tokens: expected an int in [0, 1048576]"},
      {"eval --checkpoint no-such-run --task copy --length 4x", "error: --length: expected an int in [1, 1048576], got 4x"},
  };
  for (const auto& [args, message] : cases) {
    Result r = run_lat(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.err.rfind(message, 0), 0u) << args << ": " << r.err;
  }
}

TEST(Cli, UnwritableStdoutExitsOne) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("lat_test_cli_full_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "to be or not to be\n";  // val split > block_size
  std::ofstream(dir / "corpus.txt") << text;
  std::ofstream(dir / "run.yaml") << "data.path: " << (dir / "corpus.txt").string() << "\n";
  const std::string command = std::string("'") + LAT_BINARY_DIR + "/lat' info '" + (dir / "run.yaml").string() +
                              "' >/dev/full 2>'" + (dir / "err").string() + "'";
  const int status = std::system(command.c_str());
  const std::string err = read_file(dir / "err");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_EQ(err.rfind("error: cannot write to standard output", 0), 0u) << err;
}

TEST(Cli, UnknownCommandExitsTwo) {
  Result r = run_lat("no-such-command");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
}

}  // namespace
