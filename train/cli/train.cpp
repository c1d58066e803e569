// `lat train CONFIG.yaml [--set key=value ...]`.
#include <memory>
#include <string>
#include <vector>

#include "train/cli/command.h"
#include "train/config/config.h"
#include "train/config/thread_count.h"
#include "train/run/trainer.h"

namespace lat::cli {

Command add_train_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("train", "Train a model as a YAML config says (DESIGN.md, Config)");
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  sub->add_option("config", *config_path, "the YAML config file")->required();
  sub->add_option("--set", *overrides,
                  "override a config key, e.g. --set train.max_steps=100 (the value is parsed as YAML); repeatable")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  sub->footer(
      "Writes ckpt_{step:08d}.h5, latest, config.yaml and metrics.jsonl to train.out_dir (default "
      "runs/<config name>). Running the same command again resumes from the newest checkpoint there "
      "(train.resume: auto). Ctrl-C or SIGTERM ends the step in progress, writes a checkpoint and exits 0; "
      "a step still running 3 s after the signal is abandoned without a checkpoint (exit 130 / 143), and "
      "a second Ctrl-C ends at once. Exit codes: 0 done (or stopped cleanly), 1 failure while training, "
      "2 bad usage or config (or a step too large for this machine's memory), 130 / 143 stopped inside a "
      "step by SIGINT / SIGTERM.");
  return {sub, [config_path, overrides] {
            const Config config = load_config(*config_path, *overrides);
            omp_num_threads_from_env();  // a bad OMP_NUM_THREADS is a usage error before the run directory is touched
            train(config);
            return 0;
          }};
}

}  // namespace lat::cli
