// `lat eval --checkpoint CKPT [--data PATH]`.
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "train/cli/command.h"
#include "train/inference/eval.h"

namespace lat::cli {

Command add_eval_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("eval", "Validation loss and bits per character on the whole val split");
  auto checkpoint = std::make_shared<std::string>();
  auto data = std::make_shared<std::string>();
  sub->add_option("--checkpoint", *checkpoint,
                  "a checkpoint (.h5), a run directory (its latest checkpoint), an exported model.safetensors "
                  "or an export directory")
      ->required();
  sub->add_option("--data", *data, "corpus to evaluate on (default: the checkpoint's data.path); its val split is "
                                   "the last data.val_fraction of the tokens");
  sub->footer("Prints one JSON object: checkpoint, step, data, tokens, val_loss (nats per token), "
              "val_bpc (val_loss / ln 2: bits per character for the char tokenizer).");
  return {sub, [checkpoint, data] {
            const CheckpointEval e = evaluate_checkpoint(*checkpoint, *data);
            nlohmann::ordered_json j;
            j["checkpoint"] = e.checkpoint;
            j["step"] = e.step;
            j["data"] = e.data_path;
            j["tokens"] = e.result.tokens;
            j["val_loss"] = e.result.loss;
            j["val_bpc"] = e.result.bpc();
            std::cout << j.dump() << std::endl;
            return 0;
          }};
}

}  // namespace lat::cli
