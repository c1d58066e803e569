// `lat generate --checkpoint CKPT [--prompt TEXT] [--max-new-tokens 200] [--temperature 0.8]
//               [--top-k 0] [--top-p 1.0] [--seed 0] [--threads N]`.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>

#include "data/dataset.h"
#include "train/cli/command.h"
#include "train/config/schema.h"
#include "train/config/thread_count.h"
#include "train/inference/generate.h"

namespace lat::cli {

Command add_generate_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("generate", "Sample text from a trained model; prompt + continuation to stdout");
  auto o = std::make_shared<GenerateOptions>();
  sub->add_option("--checkpoint", o->checkpoint,
                  "a checkpoint (.h5), a run directory (its latest checkpoint), an exported model.safetensors "
                  "or an export directory")
      ->required();
  sub->add_option("--prompt", o->prompt, "text to continue (default: start from a newline)");
  // Range checks live in the parser, so a bad value is a usage error (exit 2) reported
  // before the checkpoint is loaded.
  const CLI::Validator finite_non_negative(
      [](const std::string& text) {
        double value = std::strtod(text.c_str(), nullptr);
        return std::isfinite(value) && value >= 0 ? std::string() : "expected a finite number >= 0, got " + text;
      },
      "NUMBER >= 0");
  const CLI::Validator new_tokens = int_in(0, kMaxBlockSize), top_k = int_in(0, kMaxVocabSize),
                       seed = int_in(0, std::numeric_limits<int64_t>::max());
  const CLI::Validator probability_mass(
      [](const std::string& text) {
        double value = std::strtod(text.c_str(), nullptr);
        return value > 0 && value <= 1 ? std::string() : "expected a number in (0, 1], got " + text;
      },
      "NUMBER in (0, 1]");
  sub->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate")
      ->check(new_tokens)
      ->capture_default_str();
  sub->add_option("--temperature", o->sampling.temperature, "softmax temperature; 0 = greedy")
      ->check(finite_non_negative)
      ->capture_default_str();
  sub->add_option("--top-k", o->sampling.top_k, "sample among the k most likely tokens; 0 = off")
      ->check(top_k)
      ->capture_default_str();
  sub->add_option("--top-p", o->sampling.top_p, "nucleus sampling mass; 1 = off")
      ->check(probability_mass)
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "random seed of the sampler")
      ->check(seed)  // an unsigned option would take -1 as 2^64 - 1
      ->capture_default_str();
  sub->add_option("--threads", o->threads, kThreadsHelp)->check(int_in(1, kMaxThreads));
  return {sub, [o] {
            generate(*o, std::cout);
            return 0;
          }};
}

}  // namespace lat::cli
