// Reading a Hugging Face directory (hf_import.h).
#include "train/files/hf_import.h"

#include <filesystem>

#include "lat/error.h"
#include "train/config/config.h"
#include "train/files/finite_weights.h"
#include "train/files/hf_config.h"
#include "train/files/hf_export.h"
#include "train/files/hf_kimi.h"
#include "train/files/hf_shards.h"
#include "train/files/hf_tokenizer.h"
#include "train/files/hf_weights.h"
#include "train/files/json_file.h"
#include "train/files/run_dir.h"
#include "train/files/safetensors.h"
#include "train/files/tokenizer_files.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

using namespace hf_layout;

/// The tokenizer DIR/tokenizer.json describes (lat's char or byte form, else a byte-level
/// BPE); nullopt with the reasons in `why_not` when lat reads neither.
std::optional<Tokenizer> hf_json_tokenizer(const std::string& path, std::string& why_not) {
  const std::string text = read_json_file_text(path, "the tokenizer file");
  std::optional<Tokenizer> tokenizer =
      tokenizer_from_hf_json(parse_json_text(text, "load_model_weights: '" + path + "'"), why_not);
  if (tokenizer) return tokenizer;
  try {
    return subword_tokenizer("bpe", text, path);
  } catch (const Error& e) {
    why_not = "not lat's char or byte form (" + why_not + "), and " + e.what();
    return std::nullopt;
  }
}

/// The tokenizer of DIR into `ckpt` (load_hf_model) and the file it came from into `path`:
/// "none" (token ids, with a note) when there is none lat reads.
void read_hf_tokenizer(const fs::path& dir, Checkpoint& ckpt, std::string& path) {
  set_checkpoint_tokenizer(ckpt, std::nullopt);
  const std::string json_path = (dir / kTokenizerFile).string();
  const std::string model_path = (dir / export_layout::kSentencePieceFile).string();
  std::string why_not;
  if (fs::exists(json_path)) {
    path = json_path;
    if (std::optional<Tokenizer> tokenizer = hf_json_tokenizer(json_path, why_not)) {
      set_checkpoint_tokenizer(ckpt, tokenizer);
      return;
    }
  }
  // A SentencePiece model gives its own ids whatever the tokenizer.json beside it converts it to.
  if (fs::exists(model_path)) {
    path = model_path;
    try {
      set_checkpoint_tokenizer(
          ckpt, read_tokenizer_file(model_path, "load_model_weights"));
      return;
    } catch (const Error& e) {
      why_not += (why_not.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  if (why_not.empty()) {
    warn_on_stderr("'" + dir.string() + "' has no tokenizer.json or tokenizer.model: the model reads and writes token ids");
    return;
  }
  warn_on_stderr("'" + path + "' is not a tokenizer lat reads (" + why_not + "): the model reads and writes token ids");
}

}  // namespace

std::optional<std::string> hf_model_dir(const std::string& path) {
  const fs::path p(path);
  fs::path dir;
  if (fs::is_directory(p))
    dir = p;
  else if (const std::string name = p.filename().string();
           name == kConfigFile || name == kWeightsFile || name == kWeightsIndexFile)
    dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  else
    return std::nullopt;
  const fs::path config = dir / kConfigFile;
  if (!fs::is_regular_file(config)) return std::nullopt;
  if (!is_hf_config(read_json_file(config.string(), "the model config"))) return std::nullopt;
  return dir.string();
}

HfModel load_hf_model(const std::string& dir_name) {
  const fs::path dir(dir_name);
  HfModel hf;
  hf.config_path = (dir / kConfigFile).string();
  Config config;
  const nlohmann::json config_json = read_json_file(hf.config_path, "the model config");
  config.model = model_config_from_hf(config_json, hf.config_path);

  Checkpoint& ckpt = hf.checkpoint;
  read_hf_tokenizer(dir, ckpt, hf.tokenizer_path);
  // The stored config describes the model; a run's data comes from its own config or --data.
  config.data.path = "(none: '" + dir.string() + "' is a Hugging Face model without training data)";
  if (ckpt.tokenizer_type == "byte") config.data.tokenizer = "byte";
  config.train.out_dir = "runs/hf_model";  // the validator asks for one; nothing runs from this config
  ckpt.config_yaml = to_yaml(config);
  // Validated before any size is used: the validator bounds every dimension.
  try {
    config = parse_config(ckpt.config_yaml, kHfConfigPart);
  } catch (const ConfigError& e) {
    throw ConfigError("'" + hf.config_path + "': " + e.what());
  }

  NamedTensors tensors;
  if (fs::exists(dir / kWeightsFile)) {
    hf.weights_path = (dir / kWeightsFile).string();
    tensors = load_safetensors(hf.weights_path).tensors;
    check_finite_weights(tensors, hf.weights_path);
  } else if (fs::exists(dir / kWeightsIndexFile)) {
    hf.weights_path = (dir / kWeightsIndexFile).string();
    tensors = load_hf_shards(hf.weights_path);
  } else {
    throw Error("load_model_weights: '" + dir.string() + "' has no " + kWeightsFile + " or " + kWeightsIndexFile);
  }
  // transformers' KimiLinearForCausalLM ties nothing: an lm_head.weight of its own is what it
  // computes with, whatever tie_word_embeddings says.
  if (hf_family_of(config.model) == HfFamily::kimi && config.model.tie_embeddings &&
      kimi_lm_head_is_separate(tensors)) {
    config.model.tie_embeddings = false;
    ckpt.config_yaml = to_yaml(config);
  }
  if (hf_family_of(config.model) == HfFamily::kimi) {
    check_kimi_default_layer_types(config_json, hf.config_path, config.model, tensors, hf.weights_path);
    check_kimi_default_sizes(config_json, hf.config_path, config.model, tensors, hf.weights_path);
  }
  ckpt.model = lat_tensors_from_hf(config.model, config.model.vocab_size, tensors, hf.weights_path);
  hf.tensor_labels = hf_tensor_labels(config.model, config.model.vocab_size);
  return hf;
}

}  // namespace lat
