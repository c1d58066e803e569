// `lat train` under SIGTERM and Ctrl-C (DESIGN.md, "The command line"): at a step boundary the
// run saves a checkpoint and exits 0; inside a step that would run for minutes the watchdog
// ends it with 128 + signal a few seconds after the signal, leaving no checkpoint file,
// whole or partial; a second Ctrl-C ends it at once with 130. Before any of that, a config
// whose step cannot fit in this machine's memory is refused with the keys that make it large.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/host_allocation_limit.h"
#include "expect_error.h"
#include "test_files.h"
#include "train/config/config.h"
#include "train/run/memory_estimate.h"

namespace lat {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::expect_error;
using testing::read_bytes;

// Bounds on waiting for the child, far above what each stage takes: starting a run, and a
// stop (the watchdog cuts compute 3 s after the signal).
constexpr auto kStartBound = std::chrono::seconds(120);
constexpr auto kStopBound = std::chrono::seconds(10);

/// A Gated DeltaNet + attention model on mqar, out_dir `run`, with `train_yaml` (and
/// `model_yaml` lines) and a block of `block_size` tokens: 2^17 makes one step take minutes
/// (softmax attention is quadratic in it) in well under a GiB.
std::string mqar_config(const fs::path& dir, int64_t block_size, const std::string& train_yaml,
                        const std::string& model_yaml = "") {
  return "model:\n  d_model: 16\n  n_layers: 2\n  n_heads: 1\n  layers: \"gdn,attn\"\n  mlp_ratio: 2.0\n" + model_yaml +
         "data:\n  task: mqar\n  block_size: " + std::to_string(block_size) +
         "\n  mqar:\n    vocab: 64\n    pairs: [4]\n" + "train:\n  threads: 1\n  out_dir: " + (dir / "run").string() +
         "\n" + train_yaml;
}

/// `build/lat train CONFIG` as a child process, stdout and stderr to files in `dir`.
class TrainProcess {
 public:
  /// `address_space_bytes`: the child's RLIMIT_AS when given, so that its allocations fail
  /// as on a machine with less memory.
  TrainProcess(const fs::path& dir, const std::string& config_yaml,
               std::optional<rlim_t> address_space_bytes = std::nullopt)
      : err_(dir / "stderr") {
    const fs::path config = dir / "config.yaml";
    testing::write_bytes(config, config_yaml);
    const std::string lat = std::string(LAT_BINARY_DIR) + "/lat", out = (dir / "stdout").string();
    pid_ = fork();
    if (pid_ == 0) {
      if (!freopen(out.c_str(), "w", stdout) || !freopen(err_.c_str(), "w", stderr)) _exit(127);
      if (address_space_bytes) {
        const rlimit limit{*address_space_bytes, *address_space_bytes};
        if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(127);
      }
      execl(lat.c_str(), lat.c_str(), "train", config.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~TrainProcess() {
    if (!status_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  /// Waits until the child's stderr holds `text` (false when it exits first or the bound passes).
  bool wait_for_log(const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + kStartBound;
    while (std::chrono::steady_clock::now() < deadline) {
      if (contains(stderr_text(), text)) return true;
      if (exited_by(std::chrono::steady_clock::now())) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  /// Sends `signal` to the child.
  void signal(int signal) const { kill(pid_, signal); }

  /// The child's exit code once it exits within `bound`; empty when it is still running then
  /// (or ended by a signal).
  std::optional<int> exit_code_within(std::chrono::seconds bound) {
    if (!exited_by(std::chrono::steady_clock::now() + bound)) return std::nullopt;
    if (!WIFEXITED(*status_)) return std::nullopt;
    return WEXITSTATUS(*status_);
  }

  std::string stderr_text() const { return read_bytes(err_); }

 private:
  // Polls waitpid until `deadline`; true once the child has exited.
  bool exited_by(std::chrono::steady_clock::time_point deadline) {
    while (!status_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  fs::path err_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

/// The names of the files in `dir`, sorted.
std::vector<std::string> file_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

using StopTest = testing::TempDirTest;

TEST_F(StopTest, SigtermInsideALongStepEndsTheRunWithoutACheckpoint) {
  TrainProcess lat(dir_, mqar_config(dir_, 131072, "  batch_size: 1\n  max_steps: 2\n  eval_every: 0\n"));
  ASSERT_TRUE(lat.wait_for_log("optimizer: ")) << lat.stderr_text();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // inside step 1
  lat.signal(SIGTERM);
  EXPECT_EQ(lat.exit_code_within(kStopBound), 128 + SIGTERM) << lat.stderr_text();
  EXPECT_TRUE(contains(lat.stderr_text(),
                       "\nstopped by SIGTERM: step 1 was still running 3 s after the signal; no checkpoint was "
                       "written because the step was not finished; this run has no checkpoint yet\n"))
      << lat.stderr_text();
  // No checkpoint, whole or partial (*.tmp), no `latest`, no metrics record.
  EXPECT_EQ(file_names(dir_ / "run"), (std::vector<std::string>{"config.yaml", "metrics.jsonl"}));
  EXPECT_EQ(read_bytes(dir_ / "run" / "metrics.jsonl"), "");
}

TEST_F(StopTest, ASecondCtrlCEndsTheRunAtOnce) {
  TrainProcess lat(dir_, mqar_config(dir_, 131072, "  batch_size: 1\n  max_steps: 2\n  eval_every: 0\n"));
  ASSERT_TRUE(lat.wait_for_log("optimizer: ")) << lat.stderr_text();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  lat.signal(SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  lat.signal(SIGINT);
  EXPECT_EQ(lat.exit_code_within(kStopBound), 128 + SIGINT) << lat.stderr_text();
  EXPECT_TRUE(
      contains(lat.stderr_text(), "\nstopped at once by a second stop signal: no checkpoint of the step in progress\n"))
      << lat.stderr_text();
  EXPECT_FALSE(contains(lat.stderr_text(), "3 s after the signal")) << lat.stderr_text();
  EXPECT_EQ(file_names(dir_ / "run"), (std::vector<std::string>{"config.yaml", "metrics.jsonl"}));
}

TEST_F(StopTest, SigtermAtAStepBoundarySavesACheckpointAndRunsNoMoreEvals) {
  // Steps of milliseconds, each followed by an eval: the signal lands between or inside them.
  TrainProcess lat(dir_, mqar_config(dir_, 32,
                                     "  batch_size: 2\n  max_steps: 1000000\n  log_every: 1\n  eval_every: 1\n"
                                     "  eval_batches: 1\n  ckpt_every: 0\n"));
  ASSERT_TRUE(lat.wait_for_log("step 3: val loss")) << lat.stderr_text();
  lat.signal(SIGTERM);
  ASSERT_EQ(lat.exit_code_within(kStopBound), 0) << lat.stderr_text();
  const std::string err = lat.stderr_text();
  const size_t at = err.find("stopped by SIGTERM after step ");
  ASSERT_NE(at, std::string::npos) << err;
  const int64_t step = std::stoll(err.substr(at + std::string("stopped by SIGTERM after step ").size()));
  EXPECT_GE(step, 3);
  char name[32];
  std::snprintf(name, sizeof(name), "ckpt_%08lld.h5", static_cast<long long>(step));
  EXPECT_EQ(read_bytes(dir_ / "run" / "latest"), std::string(name) + "\n");
  EXPECT_TRUE(fs::is_regular_file(dir_ / "run" / name));
  // The last step logged its loss and got no eval: the stop came first.
  std::istringstream metrics(read_bytes(dir_ / "run" / "metrics.jsonl"));
  nlohmann::json last;
  for (std::string line; std::getline(metrics, line);) last = nlohmann::json::parse(line);
  EXPECT_EQ(last["step"], step);
  EXPECT_TRUE(last.contains("loss")) << last.dump();
}

// The config: a 0.03M-parameter hybrid whose one step over 2^20 tokens held 6.4 GB.
TEST_F(StopTest, AStepLargerThanTheMemoryIsRefusedNamingTheKeysThatMakeItLarge) {
  const Config config = parse_config(mqar_config(dir_, 1048576, "  batch_size: 1\n"), "big.yaml");
  const StepMemory estimate = estimate_step_memory(config, 64, 1);
  EXPECT_GT(estimate.activations, 4.0 * (1 << 30));
  EXPECT_LT(estimate.parameters, 1 << 20);
  const double gib = double(1 << 30);
  check_step_memory(config, estimate, 64, 64 * gib);  // fits in 64 GiB
  expect_error<ConfigError>([&] { check_step_memory(config, estimate, 64, 4 * gib); },
                            {"train: one training step needs about ",
                             " GiB (parameters, gradients and optimizer moments 0.0 GiB, "
                             "activations saved for backward ",
                             "), more than 90% of this machine's memory (4.0 GiB): make data.block_size (1048576), "
                             "train.batch_size (1), model.d_model (16) or model.n_layers (2) smaller"});
}

// A block shorter than a chunk is padded to chunk rows (16 at least) inside the linear
// mixers' kernels: 16384 sequences of 1 token hold as much there as 16384 of 16.
TEST_F(StopTest, TheEstimateCountsTheChunkPaddingOfShortBlocks) {
  Config one = parse_config(mqar_config(dir_, 64, "  batch_size: 1\n"), "run.yaml");
  Config sixteen = one;
  one.data.block_size = 1;
  sixteen.data.block_size = 16;
  // The same 16384 tokens: the gdn layer's share 16 times larger at block 1 (its chunks are
  // 16 rows of 1 token), attention's and the MLP's the same.
  const double a1 = estimate_step_memory(one, 64, 16384).activations;
  const double a16 = estimate_step_memory(sixteen, 64, 1024).activations;
  EXPECT_GT(a1, 2.0 * a16);
  EXPECT_LT(a1, 16.0 * a16);
}

TEST_F(StopTest, TrainRefusesAStepBeyondTheMemoryBeforeTouchingIt) {
  // 2^20 tokens x 1024 rows, and a 2^24 vocabulary: terabytes on any machine.
  struct Case {
    int64_t block_size;
    std::string train_yaml, model_yaml, keys;
  };
  const std::vector<Case> cases = {
      {1048576, "  batch_size: 1024\n", "",
       "make data.block_size (1048576), train.batch_size (1024), model.d_model (16) or model.n_layers (2) smaller"},
      {1024, "  batch_size: 64\n", "  vocab_size: 16777216\n",
       "make data.block_size (1024), train.batch_size (64) or model.vocab_size (16777216) smaller"},
  };
  for (const Case& c : cases) {
    const std::string yaml = mqar_config(dir_, c.block_size, c.train_yaml, c.model_yaml);
    TrainProcess lat(dir_, yaml);
    EXPECT_EQ(lat.exit_code_within(kStopBound), 2) << lat.stderr_text();
    const std::string err = lat.stderr_text();
    EXPECT_TRUE(contains(err, "error: train: one training step needs about ")) << err;
    EXPECT_TRUE(contains(err, c.keys)) << err;
    EXPECT_FALSE(fs::exists(dir_ / "run")) << err;  // refused before out_dir is created
  }
}

// A step that the estimate lets through but the allocator cannot serve (a memory limit the
// estimate does not see) names the sizes to shrink, not a divergence.
TEST_F(StopTest, AStepOutOfHostMemoryFailsWithASizeHint) {
  if (host_physical_memory() < (size_t{8} << 30)) GTEST_SKIP() << "the estimate refuses this step here";
  // Logits of 1024 tokens x 2^19: 2 GiB, beyond a 1.5 GiB address space.
  TrainProcess lat(
      dir_, mqar_config(dir_, 256, "  batch_size: 4\n  max_steps: 2\n  eval_every: 0\n", "  vocab_size: 524288\n"),
      rlim_t{3} << 29);
  EXPECT_EQ(lat.exit_code_within(std::chrono::seconds(120)), 1) << lat.stderr_text();
  const std::string err = lat.stderr_text();
  EXPECT_TRUE(contains(err, "error: train: step 1: Storage: out of host memory allocating ")) << err;
  EXPECT_TRUE(contains(err,
                       "; stopping. No checkpoint was written yet. (One step needs more memory than this "
                       "machine gives: make data.block_size, train.batch_size, model.vocab_size, model.d_model "
                       "or model.n_layers smaller.)\n"))
      << err;
  EXPECT_FALSE(contains(err, "diverged")) << err;
}

}  // namespace
}  // namespace lat
