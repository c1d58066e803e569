// The subcommands of the `lat` tool. Each lives in its own file train/cli/<name>.cpp and
// defines one `Command add_<name>_command(CLI::App& app)`, declared here and listed in
// main.cpp: it registers its options on a sub-app of `app` and returns what to run when
// that sub-app was chosen.
#pragma once
#include <cstdint>
#include <charconv>
#include <cstdlib>
#include <system_error>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace lat::cli {

/// A registered subcommand. `run` is called after parsing succeeded and the subcommand
/// was chosen; it returns the exit code (0 success) and throws lat::Error for a failure
/// while running (exit 1).
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

/// An option check "INT in [low, high]": range checks live in the parser, so that a bad value
/// is a usage error (exit 2) reported before anything is loaded. The whole text must be an
/// integer in range (no saturation of a huge value).
inline CLI::Validator int_in(int64_t low, int64_t high) {
  return CLI::Validator(
      [low, high](const std::string& text) {
        int64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error == std::errc() && end == text.data() + text.size() && value >= low && value <= high) return std::string();
        return "expected an int in [" + std::to_string(low) + ", " + std::to_string(high) + "], got " + text;
      },
      "INT in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
}

/// The help of eval's and generate's --threads (config/thread_count.h).
inline constexpr const char* kThreadsHelp =
    "OpenMP threads (default: OMP_NUM_THREADS, else all cores; the checkpoint's train.threads is not used)";

/// `lat train CONFIG.yaml [--set key=value ...]` (train/cli/train.cpp).
Command add_train_command(CLI::App& app);
/// `lat generate --checkpoint CKPT [--prompt ...] ...` (train/cli/generate.cpp).
Command add_generate_command(CLI::App& app);
/// `lat eval --checkpoint CKPT [--data PATH]` (train/cli/eval.cpp).
Command add_eval_command(CLI::App& app);
/// `lat export --checkpoint CKPT --format safetensors|h5-weights --out DIR` (train/cli/export.cpp).
Command add_export_command(CLI::App& app);
/// `lat info CKPT|CONFIG [--context L]` (train/cli/info.cpp).
Command add_info_command(CLI::App& app);
/// `lat plot RUN_DIR [RUN_DIR ...] [--out FILE.png] [--x step|tokens|time]` (train/cli/plot.cpp).
Command add_plot_command(CLI::App& app);
/// `lat tokenizer encode|decode --tokenizer SPEC ...` (train/cli/tokenizer.cpp).
Command add_tokenizer_command(CLI::App& app);

}  // namespace lat::cli
