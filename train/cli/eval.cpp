// `lat eval --checkpoint CKPT [--data PATH] [--threads N]` and
// `lat eval --checkpoint CKPT --task mqar|copy [--pairs N | --length L] [--seq-len T] [--samples S] [--seed 0] [--json]
//  [--threads N]`.
#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "train/cli/command.h"
#include "train/config/schema.h"
#include "train/config/thread_count.h"
#include "train/inference/eval.h"
#include "train/inference/task_eval.h"

namespace lat::cli {

Command add_eval_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "eval", "Validation loss and bits per character (or byte) on the whole val split, or recall accuracy on a synthetic task");
  auto checkpoint = std::make_shared<std::string>();
  auto data = std::make_shared<std::string>();
  auto task = std::make_shared<TaskEvalOptions>();
  auto json = std::make_shared<bool>(false);
  sub->add_option("--checkpoint", *checkpoint,
                  "a checkpoint (.h5), a run directory (its latest checkpoint), an exported model.safetensors "
                  "or an export directory")
      ->required();
  CLI::Option* data_option =
      sub->add_option("--data", *data, "corpus to evaluate on (default: the checkpoint's data.path); its val split is "
                                       "the last data.val_fraction of the tokens");
  // Lengths as data.block_size allows; a million scored sequences is hours here already.
  constexpr int64_t kMaxSamples = 1'000'000;
  const CLI::Validator length = int_in(1, kMaxBlockSize), samples = int_in(1, kMaxSamples),
                       seed = int_in(0, std::numeric_limits<int64_t>::max());
  CLI::Option* task_option =
      sub->add_option("--task", task->task, "synthetic task to score: mqar or copy")
          ->check(CLI::IsMember({"mqar", "copy"}))
          ->excludes(data_option);
  sub->add_option("--pairs", task->pairs,
                  "mqar: key-value pairs per sequence (default: the largest of the checkpoint's data.mqar.pairs)")
      ->check(length)
      ->needs(task_option);
  sub->add_option("--length", task->length, "copy: tokens of the string to copy (default: data.copy.length)")
      ->check(length)
      ->needs(task_option);
  sub->add_option("--seq-len", task->seq_len, "tokens per sequence (default: the checkpoint's data.block_size)")
      ->check(length)
      ->needs(task_option);
  sub->add_option("--samples", task->samples, "sequences scored")
      ->check(samples)
      ->needs(task_option)
      ->capture_default_str();
  sub->add_option("--seed", task->seed, "seed of the generated sequences")
      ->check(seed)  // an unsigned option would take -1 as 2^64 - 1
      ->needs(task_option)
      ->capture_default_str();
  sub->add_flag("--json", *json, "with --task: print one JSON object instead of the key=value line")
      ->needs(task_option);
  sub->add_option("--threads", task->threads, kThreadsHelp)->check(int_in(1, kMaxThreads));
  sub->footer("Without --task: prints one JSON object: checkpoint, step, data, tokens, val_loss (nats per token), "
              "val_bpc (val_loss / ln 2: bits per character for the char tokenizer, per byte for byte); with a subword "
              "tokenizer also text_bytes (UTF-8 bytes of the scored targets' text) and val_bpb (bits per byte: "
              "val_loss x tokens / (ln 2 x text_bytes)).\n"
              "With --task: prints one line `task=mqar pairs=N seq_len=T samples=S accuracy=A seq_accuracy=B` "
              "(copy: `task=copy length=L ...`): accuracy over answer tokens (greedy), seq_accuracy the share of "
              "sequences with every answer right; --json prints the same fields as one JSON object.");
  return {sub, [checkpoint, data, task, json, task_option] {
            if (task_option->count() > 0) {
              task->checkpoint = *checkpoint;
              const TaskEval e = evaluate_task(*task);
              std::cout << (*json ? e.json() : e.line()) << std::endl;
              return 0;
            }
            const CheckpointEval e = evaluate_checkpoint(*checkpoint, *data, task->threads);
            nlohmann::ordered_json j;
            j["checkpoint"] = e.checkpoint;
            j["step"] = e.step;
            j["data"] = e.data_path;
            j["tokens"] = e.result.tokens;
            j["val_loss"] = e.result.loss;
            j["val_bpc"] = e.result.bpc();
            if (e.result.text_bytes > 0) {  // a subword tokenizer: bits per byte compare across vocabularies
              j["text_bytes"] = e.result.text_bytes;
              j["val_bpb"] = e.result.bits_per_byte();
            }
            std::cout << j.dump() << std::endl;
            return 0;
          }};
}

}  // namespace lat::cli
