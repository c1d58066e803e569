// Reading a Hugging Face directory of one of lat's families (hf_config.h: Qwen3.5,
// granitemoehybrid, kimi_linear; hf_export.h's files, whoever wrote them: `lat export --format hf` or
// transformers' save_pretrained) as a lat model.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "train/files/checkpoint.h"

namespace lat {

/// Where the lat keys translated from a config.json come from, in validator messages.
inline constexpr const char* kHfConfigPart = "config.json as lat keys";

/// The Hugging Face model directory `path` names: `path` itself, or the directory of a
/// config.json, model.safetensors or model.safetensors.index.json given as `path`, when that
/// directory's config.json has a family's model_type (qwen3_5_text, granitemoehybrid,
/// kimi_linear);
/// nullopt otherwise (another format).
/// Throws lat::Error when that config.json cannot be read or is not JSON.
std::optional<std::string> hf_model_dir(const std::string& path);

/// A Hugging Face model directory read as lat parts.
struct HfModel {
  std::string config_path;   // DIR/config.json
  std::string weights_path;  // DIR/model.safetensors or DIR/model.safetensors.index.json
  std::string tokenizer_path;  // the tokenizer file read: DIR/tokenizer.json or DIR/tokenizer.model
  /// config_yaml: a lat config whose model.* keys are config.json's (model_config_from_hf; the
  /// rest defaults, data.path a placeholder naming the directory); tokenizer from
  /// tokenizer.json; model tensors under lat's names (f32). Step 0, no training state.
  Checkpoint checkpoint;
  /// lat tensor name -> how the file names it (hf_tensor_labels), for messages.
  std::map<std::string, std::string> tensor_labels;
};

/// Reads the directory `dir` (hf_model_dir). The tokenizer is DIR/tokenizer.json when it is one
/// of lat's two forms (hf_tokenizer.h) or a byte-level BPE lat reads; else DIR/tokenizer.model
/// when it is a SentencePiece model; otherwise, or without either, the model reads and writes
/// token ids and a one-line note on stderr says why. Weights: model.safetensors, or the shards
/// a model.safetensors.index.json names in the same directory (F32, BF16 or F16). Throws
/// lat::Error naming the file and the key or tensor: config.json keys lat cannot honour
/// (model_config_from_hf), a bad tokenizer.json (not JSON), missing weights, an index that
/// disagrees with its shards (load_hf_shards), missing, unexpected or mis-shaped tensors
/// (lat_tensors_from_hf), a weight that is NaN or inf; tensors are named as the file names them.
HfModel load_hf_model(const std::string& dir);

}  // namespace lat
