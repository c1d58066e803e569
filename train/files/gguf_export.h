// `lat export --format gguf`: a model as one GGUF file of a llama.cpp architecture (DESIGN.md
// "Export formats"): qwen35 for gdn + attn models (gguf_qwen35.cpp), granitehybrid for mamba2
// + attn models (gguf_granite.cpp), kimi-linear for kda + mla models (gguf_kimi.cpp), chosen
// by model.layers (gguf_architecture.h). Each lat
// tensor becomes llama.cpp's as llama.cpp's own converter would write it from the Hugging Face
// model. Norms, 1-D tensors and convolutions stay f32 (as llama.cpp's converter keeps them);
// q8_0 tensors whose rows are not a multiple of 32 are stored f16.
#pragma once
#include <optional>
#include <string>

#include "data/tokenizer.h"
#include "train/config/config_types.h"
#include "train/files/gguf_writer.h"
#include "train/files/model_reader.h"

namespace lat {

/// "f32" | "f16" | "bf16" | "q8_0" -> the tensor type of the file's weight matrices. Throws
/// ConfigError naming --dtype otherwise.
GgmlType parse_gguf_dtype(const std::string& name);

/// Throws ConfigError "export --format gguf: ..." for the first thing of `model` (resolved)
/// and `tokenizer` (for `vocab_size` embedding rows) that the chosen llama.cpp architecture
/// cannot express (qwen35: what Qwen3.5 cannot (check_qwen35_expressible), a gdn value head dim
/// other than its key head dim, layers of one kind only; granitehybrid: see gguf_granite.cpp;
/// kimi-linear: see gguf_kimi.cpp),
/// a model without a tokenizer (trained on token ids), or a tokenizer gguf_vocabulary refuses.
void check_gguf_expressible(const ModelConfig& model, const std::optional<Tokenizer>& tokenizer, int64_t vocab_size);

/// Writes `w` (check_gguf_expressible first) with `vocab_size` embedding rows as the GGUF file
/// `path`, weight matrices in `dtype`. Throws lat::Error naming a tensor of `w` that is missing
/// or mis-shaped, or the file when it cannot be written.
void write_gguf_export(const ModelWeights& w, int64_t vocab_size, GgmlType dtype, const std::string& path);

}  // namespace lat
