// `lat export --checkpoint CKPT --format safetensors|h5-weights|hf|gguf --out DIR|FILE.gguf [--dtype ...]`.
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "train/cli/command.h"
#include "train/config/config.h"
#include "train/files/export.h"

namespace lat::cli {
namespace {

/// "1,2,3" -> {1, 2, 3}. Throws ConfigError naming --check-tokens otherwise.
std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    try {
      ids.push_back(std::stoll(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || ids.back() < 0)
      throw ConfigError("export: --check-tokens: expected comma-separated token ids, got '" + item + "'");
  }
  return ids;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("export", "Write a checkpoint's weights for other tools (safetensors), "
                                               "as a weights-only checkpoint (h5-weights), as a Hugging Face "
                                               "model directory (hf: Qwen3.5, Granite-4.0-H or Kimi Linear), or as "
                                               "one llama.cpp file (gguf)");
  auto o = std::make_shared<ExportOptions>();
  auto check_tokens = std::make_shared<std::string>();
  sub->add_option("--checkpoint", o->checkpoint,
                  "a checkpoint (.h5), an exported model.safetensors, an export, run or Hugging Face directory")
      ->required();
  sub->add_option("--format", o->format, "safetensors, h5-weights, hf or gguf")->capture_default_str();
  sub->add_option("--out", o->out_dir, "output directory (created when missing); for gguf the .gguf file")->required();
  sub->add_option("--dtype", o->dtype,
                  "f32 or bf16 (round to nearest even; safetensors and hf); gguf: f32, f16, bf16 or q8_0")
      ->capture_default_str();
  sub->add_option("--check-tokens", *check_tokens,
                  "comma-separated token ids: also write check_logits.safetensors with lat's logits for them "
                  "(forward and step-by-step), computed from the export read back; tools/check_export.py "
                  "compares them with its own PyTorch forward")
      ->type_name("IDS");
  sub->footer(
      "safetensors: DIR/model.safetensors (the checkpoint's tensor names and shapes; with tied embeddings "
      "also lm_head.weight), DIR/config.json (hyperparameters, architectures, model_type, lat_config), "
      "DIR/tokenizer.json. h5-weights: DIR/model.h5 (model, config, tokenizer; no optimizer state). "
      "hf: what transformers' AutoModelForCausalLM and AutoTokenizer load (config.json, model.safetensors, "
      "generation_config.json, tokenizer.json, tokenizer_config.json), by model.layers: gdn and attn layers "
      "(with attn.output_gate and attn.qk_norm) as Qwen3_5ForCausalLM, mamba2 and attn layers as "
      "GraniteMoeHybridForCausalLM, kda and mla layers as KimiLinearForCausalLM; no attention window. "
      "gguf: FILE.gguf for llama.cpp (arch qwen35: the layers hf expresses, with equal gdn key and value head "
      "dims; arch granitehybrid: mamba2 (expand 2) and attn layers, no attn gate, q/k norm or window; arch "
      "kimi-linear: kda and mla layers, both kinds, equal kda key and value head dims, no q_lora_rank; "
      "tokenizer metadata for char, byte, byte-level BPE and SentencePiece BPE tokenizers); norms, 1-D "
      "tensors and the convolutions stay f32. "
      "The others load back with `lat generate --checkpoint DIR/model.safetensors` (or DIR/model.h5, or DIR for hf). "
      "The written paths go to stdout, one per line.");
  return {sub, [o, check_tokens] {
            if (!check_tokens->empty()) o->check_tokens = parse_ids(*check_tokens);
            for (const std::string& path : export_model(*o)) std::cout << path << "\n";
            return 0;
          }};
}

}  // namespace lat::cli
