// Reading every model format into ModelWeights (model_reader.h).
#include "train/files/model_reader.h"

#include <filesystem>
#include <optional>
#include <type_traits>

#include "lat/error.h"
#include "train/config/config.h"
#include "train/files/config_json.h"
#include "train/files/export_layout.h"
#include "train/files/json_file.h"
#include "train/files/run_dir.h"
#include "train/files/safetensors.h"
#include "train/files/tokenizer_files.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

using namespace export_layout;

/// A checkpoint (or an h5-weights export) without its training-only parts.
ModelWeights load_h5(const std::string& path) {
  ModelWeights w;
  w.path = path;
  w.checkpoint = load_checkpoint(path, CheckpointParts::weights_only);
  w.checkpoint.optimizer = {};
  w.checkpoint.rng_state.clear();
  w.checkpoint.data = {};
  return w;
}

/// The integer or float __metadata__ value `key`, or `fallback` when absent.
template <class T>
T metadata_number(const SafetensorsFile& file, const std::string& key, T fallback) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) return fallback;
  try {
    size_t used = 0;
    T value;
    if constexpr (std::is_integral_v<T>)
      value = static_cast<T>(std::stoll(it->second, &used));
    else
      value = static_cast<T>(std::stod(it->second, &used));
    if (used == it->second.size()) return value;
  } catch (const std::exception&) {
  }
  throw Error("load_model_weights: '" + file.path + "': __metadata__ '" + key + "': expected a number, got '" +
              it->second + "'");
}

/// The root attributes a safetensors export keeps in __metadata__ (export.cpp writes them).
void read_export_metadata(const SafetensorsFile& file, Checkpoint& ckpt) {
  ckpt.step = metadata_number<int64_t>(file, "step", 0);
  ckpt.tokens_seen = metadata_number<int64_t>(file, "tokens_seen", 0);
  ckpt.val_loss = metadata_number<double>(file, "val_loss", ckpt.val_loss);
  ckpt.best_val_loss = metadata_number<double>(file, "best_val_loss", ckpt.best_val_loss);
  ckpt.world_size = metadata_number<int64_t>(file, "world_size", 1);
  if (auto it = file.metadata.find("lat_version"); it != file.metadata.end()) ckpt.lat_version = it->second;
  if (auto it = file.metadata.find("created"); it != file.metadata.end()) ckpt.created = it->second;
  if (auto it = file.metadata.find("frozen"); it != file.metadata.end()) {
    const nlohmann::json frozen = parse_json(it->second, file.path + " __metadata__ frozen");
    if (!frozen.is_array())
      throw Error("load_model_weights: '" + file.path + "': __metadata__ 'frozen': expected a JSON list");
    for (const auto& name : frozen) {
      if (!name.is_string())
        throw Error("load_model_weights: '" + file.path + "': __metadata__ 'frozen': expected names");
      ckpt.frozen.push_back(name.get<std::string>());
    }
  }
}

/// An exported model.safetensors with the config.json and tokenizer.json beside it.
ModelWeights load_exported_safetensors(const std::string& path) {
  ModelWeights w;
  w.path = path;
  Checkpoint& ckpt = w.checkpoint;
  const SafetensorsFile file = load_safetensors(path);
  const fs::path dir = fs::path(path).parent_path();
  const std::string config_path = (dir / kConfigFile).string();
  ckpt.config_yaml = read_lat_config(config_path, path);
  const Config parsed = parse_config(ckpt.config_yaml, config_path);
  const std::string tokenizer_path = (dir / kTokenizerFile).string();
  ckpt.tokenizer_type = "none";  // as the trainer saves a model trained on token ids
  if (fs::exists(tokenizer_path)) read_tokenizer_json(tokenizer_path, ckpt);
  read_export_metadata(file, ckpt);
  for (const auto& [name, tensor] : file.tensors) {
    // The tied copy exists for other tools; lat's model has no lm_head then.
    if (parsed.model.tie_embeddings && name == "lm_head.weight") continue;
    ckpt.model.emplace_back(name, tensor);
  }
  return w;
}

}  // namespace

ModelWeights load_model_weights(const std::string& path) {
  const fs::path p(path);
  if (fs::is_directory(p)) {
    // A run directory first (DESIGN.md); else an export directory.
    if (std::optional<std::string> latest = find_latest_checkpoint(path)) return load_h5(*latest);
    if (fs::is_regular_file(p / kWeightsFile)) return load_h5((p / kWeightsFile).string());
    if (fs::is_regular_file(p / kSafetensorsFile)) return load_exported_safetensors((p / kSafetensorsFile).string());
    return load_h5(resolve_checkpoint(path));  // throws: no checkpoint there
  }
  if (p.extension() == ".safetensors") return load_exported_safetensors(path);
  return load_h5(resolve_checkpoint(path));
}

}  // namespace lat
