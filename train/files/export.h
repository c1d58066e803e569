// `lat export` (DESIGN.md "The command line"): a checkpoint's weights for other tools, as the
// files of export_layout.h. Reading them back is model_reader.h's job.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lat {

/// `lat export`'s flags.
struct ExportOptions {
  std::string checkpoint;              // anything load_model_weights accepts
  std::string format = "safetensors";  // safetensors, h5-weights, hf (hf_export.h) or gguf (gguf_export.h)
  std::string out_dir;                 // created when missing; gguf: the .gguf file
  std::string dtype = "f32";           // f32 or bf16 (safetensors and hf); gguf also f16, q8_0
  /// When not empty, also DIR/check_logits.safetensors for tools/check_export.py: "tokens"
  /// [T] (the ids as f32), "logits" [T, vocab] (HybridLM::forward, the training path) and
  /// "logits_step" [T, vocab] (HybridLM::step one token at a time, the generation path), both
  /// computed by lat from the export read back (so bf16 exports are checked as written).
  std::vector<int64_t> check_tokens;
};

/// Writes the export (export_layout.h; hf_export.h for --format hf; gguf_export.h for --format
/// gguf, whose --out is the .gguf file) and returns the paths written. Throws ConfigError for a
/// bad format or dtype (bf16 with h5-weights), a check token outside the vocabulary, an --out
/// that is the model's own directory or a run directory or, for hf, a model Qwen3.5 cannot
/// express (check_hf_expressible), for gguf one llama.cpp cannot (check_gguf_expressible), an
/// --out not ending in .gguf or --check-tokens,
/// all before anything is written (--out is not created), lat::Error when the checkpoint cannot be read, its tensors do
/// not match its config, or a file cannot be written.
std::vector<std::string> export_model(const ExportOptions& options);

}  // namespace lat
