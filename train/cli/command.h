// The subcommands of the `lat` tool. Each lives in its own file train/cli/<name>.cpp and
// defines one `Command add_<name>_command(CLI::App& app)`, declared here and listed in
// main.cpp: it registers its options on a sub-app of `app` and returns what to run when
// that sub-app was chosen.
#pragma once
#include <cstdint>
#include <cstdlib>
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

/// An option check "INT >= low": range checks live in the parser, so that a bad value is a
/// usage error (exit 2) reported before anything is loaded.
inline CLI::Validator int_at_least(int64_t low) {
  return CLI::Validator(
      [low](const std::string& text) {
        return std::strtoll(text.c_str(), nullptr, 10) >= low
                   ? std::string()
                   : "expected an int >= " + std::to_string(low) + ", got " + text;
      },
      "INT >= " + std::to_string(low));
}

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

}  // namespace lat::cli
