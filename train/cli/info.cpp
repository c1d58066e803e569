// `lat info CKPT|CONFIG [--context L]`.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "train/cli/command.h"
#include "train/inference/info.h"

namespace lat::cli {

Command add_info_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("info",
                                     "Parameters per module, generation memory versus an attention-only "
                                     "model; for a checkpoint also step, tokens seen, val loss, config, "
                                     "once it loads as generate loads it (exit 1 otherwise)");
  auto path = std::make_shared<std::string>();
  auto context = std::make_shared<int64_t>(2048);
  sub->add_option("path", *path,
                  "a YAML config (.yaml/.yml) or a checkpoint: .h5, model.safetensors, export or run directory")
      ->required();
  sub->add_option("--context", *context, "context length L for the memory figures")
      ->check(CLI::Validator(
          [](const std::string& text) {
            const long long value = std::strtoll(text.c_str(), nullptr, 10);  // saturates on overflow
            return value >= 1 && value <= kMaxContext ? std::string()
                                                      : "expected an int in [1, 2^40], got " + text;
          },
          "INT in [1, 2^40]"))
      ->capture_default_str();
  sub->footer(
      "Memory per sequence in f32: a linear layer keeps its recurrent state (n_heads x K x V) and short-conv "
      "states whatever L is; an attention layer keeps a KV cache of 2 x min(L, window) x n_kv_heads x head_dim. "
      "The comparison is an attention-only model of the same shape with full attention (no window).");
  return {sub, [path, context] {
            std::cout << format_info(inspect(*path, *context));
            return 0;
          }};
}

}  // namespace lat::cli
