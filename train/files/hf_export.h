// `lat export --format hf`: a model as a Hugging Face directory of its family (hf_config.h:
// Qwen3.5, granitemoehybrid or kimi_linear; DESIGN.md "Interop"), which transformers loads with
// AutoModelForCausalLM / AutoTokenizer.from_pretrained(DIR):
//
//   DIR/config.json               Qwen3_5ForCausalLM's or GraniteMoeHybridForCausalLM's config
//   DIR/model.safetensors         transformers' names and layouts (hf_weights.h); __metadata__ format=pt
//   DIR/generation_config.json    no special tokens
//   DIR/tokenizer.json            char or byte tokenizer (hf_tokenizer.h), or a bpe tokenizer's own
//                                 file; absent for a model trained on token ids
//   DIR/tokenizer.model           a sentencepiece tokenizer's own file (then no tokenizer.json)
//   DIR/tokenizer_config.json     for AutoTokenizer (hf_tokenizer.h); absent for token ids
// Reading such a directory back is hf_import.h's job.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/files/export_layout.h"
#include "train/files/model_reader.h"
#include "train/files/safetensors.h"

namespace lat::hf_layout {

// The files both layouts have keep lat's export names (export_layout.h): one spelling each.
inline constexpr const char* kConfigFile = export_layout::kConfigFile;
inline constexpr const char* kWeightsFile = export_layout::kSafetensorsFile;
inline constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";
inline constexpr const char* kGenerationConfigFile = "generation_config.json";
inline constexpr const char* kTokenizerFile = export_layout::kTokenizerFile;
inline constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";

}  // namespace lat::hf_layout

namespace lat {

/// Writes the files above for `w` (a model its family expresses: check_hf_expressible first, before
/// creating `out_dir`) with `vocab_size` tokens into the existing directory `out_dir`, weights
/// in `dtype`, and appends the paths written to `written` (model.safetensors first). Throws
/// lat::Error naming a tensor of `w` that is missing or mis-shaped, or a file that cannot be
/// written.
void write_hf_export(const ModelWeights& w, int64_t vocab_size, SafetensorsDType dtype, const std::string& out_dir,
                     std::vector<std::string>& written);

}  // namespace lat
