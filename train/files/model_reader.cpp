// Reading every model format into ModelWeights (model_reader.h).
#include "train/files/model_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>

#include "lat/error.h"
#include "train/config/config.h"
#include "train/files/config_json.h"
#include "train/files/export_layout.h"
#include "train/files/finite_weights.h"
#include "train/files/hf_export.h"
#include "train/files/hf_import.h"
#include "train/files/json_file.h"
#include "train/files/run_dir.h"
#include "train/files/safetensors.h"
#include "train/files/tokenizer_files.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

using namespace export_layout;

/// Where the parts of a model came from, for messages: the checkpoint holds them all; an
/// export keeps its config and tokenizer in the JSON files beside the weights.
struct PartSources {
  std::string config_file;  // the file holding the config
  std::string config_part;  // where in it: "/config" (HDF5 dataset) or "lat_config" (JSON key)
  std::string tokenizer;    // "'<checkpoint>' /tokenizer" or "'<dir>/tokenizer.json'"
  std::optional<nlohmann::json> export_config_json = std::nullopt;  // an export's config.json, as read
};

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

/// "load_model_weights: '<file>': __metadata__ '<key>': ", the start of an error message.
std::string metadata_where(const SafetensorsFile& file, const std::string& key) {
  return "load_model_weights: '" + file.path + "': __metadata__ '" + key + "': ";
}

/// The integer __metadata__ value `key`, or `fallback` when absent. Held to the bound the
/// checkpoint reader holds the same root attribute to: a step or count below `at_least` is
/// damage, never a value to run with.
int64_t metadata_integer(const SafetensorsFile& file, const std::string& key, int64_t fallback, int64_t at_least) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) return fallback;
  const std::string& text = it->second;
  int64_t value = 0;
  size_t used = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  if (used == 0 || used != text.size())
    throw Error(metadata_where(file, key) + "expected an integer, got '" + excerpt(text) + "'");
  if (value < at_least)
    throw Error(metadata_where(file, key) + "expected an integer >= " + std::to_string(at_least) + ", got '" + text +
                "'");
  return value;
}

/// The float __metadata__ value `key`, or `fallback` when absent.
double metadata_float(const SafetensorsFile& file, const std::string& key, double fallback) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) return fallback;
  try {
    size_t used = 0;
    const double value = std::stod(it->second, &used);
    if (used == it->second.size()) return value;
  } catch (const std::exception&) {
  }
  throw Error(metadata_where(file, key) + "expected a number, got '" + excerpt(it->second) + "'");
}

/// The root attributes a safetensors export keeps in __metadata__ (export.cpp writes them).
void read_export_metadata(const SafetensorsFile& file, Checkpoint& ckpt) {
  ckpt.step = metadata_integer(file, "step", 0, 0);
  ckpt.tokens_seen = metadata_integer(file, "tokens_seen", 0, 0);
  ckpt.val_loss = metadata_float(file, "val_loss", ckpt.val_loss);
  ckpt.best_val_loss = metadata_float(file, "best_val_loss", ckpt.best_val_loss);
  ckpt.world_size = metadata_integer(file, "world_size", 1, 1);
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
ModelWeights load_exported_safetensors(const std::string& path, PartSources& sources) {
  ModelWeights w;
  w.path = path;
  Checkpoint& ckpt = w.checkpoint;
  const SafetensorsFile file = load_safetensors(path);
  const fs::path dir = fs::path(path).parent_path();
  const std::string config_path = (dir / kConfigFile).string();
  // lat's export always stores checksums: without them a flipped bit would load unnoticed.
  if (file.metadata.count(kChecksumMetadataKey) == 0)
    throw Error("load_model_weights: '" + path + "': __metadata__ has no '" + kChecksumMetadataKey +
                "': expected the tensor checksums lat export writes beside lat_config ('" + config_path + "')");
  nlohmann::json config_json = read_export_config_json(config_path, path);
  ckpt.config_yaml = config_json["lat_config"].get<std::string>();
  // A sentencepiece model's export has its tokenizer.model instead of a tokenizer.json.
  std::string tokenizer_path = (dir / kTokenizerFile).string();
  if (!fs::exists(tokenizer_path) && fs::exists(dir / kSentencePieceFile))
    tokenizer_path = (dir / kSentencePieceFile).string();
  sources = {config_path, "lat_config", "'" + tokenizer_path + "'", std::move(config_json)};
  ckpt.tokenizer_type = "none";  // as the trainer saves a model trained on token ids
  if (fs::exists(tokenizer_path))
    set_checkpoint_tokenizer(ckpt, read_tokenizer_file(tokenizer_path, "load_model_weights"));
  read_export_metadata(file, ckpt);
  ckpt.model = file.tensors;
  return w;
}

/// The checkpoint `path` (load_h5), its parts' sources in `sources`.
ModelWeights load_h5_from(const std::string& path, PartSources& sources) {
  sources = {path, "/config", "'" + path + "' /tokenizer"};
  return load_h5(path);
}

/// A Hugging Face directory (hf_import.h).
ModelWeights load_hf_from(const std::string& dir, PartSources& sources) {
  HfModel hf = load_hf_model(dir);
  ModelWeights w;
  w.path = hf.weights_path;
  w.format = ModelFormat::hf;
  w.checkpoint = std::move(hf.checkpoint);
  w.tensor_labels = std::move(hf.tensor_labels);
  const std::string tokenizer_path =
      hf.tokenizer_path.empty() ? (fs::path(dir) / hf_layout::kTokenizerFile).string() : hf.tokenizer_path;
  sources = {hf.config_path, kHfConfigPart, "'" + tokenizer_path + "'"};
  return w;
}

/// The files of `path` read as they are (see load_model_weights); `sources` says where.
ModelWeights read_model_files(const std::string& path, PartSources& sources) {
  const fs::path p(path);
  if (fs::is_directory(p)) {
    // A run directory first (DESIGN.md); else a Hugging Face or an export directory.
    if (std::optional<std::string> latest = find_latest_checkpoint(path)) return load_h5_from(*latest, sources);
    if (std::optional<std::string> dir = hf_model_dir(path)) return load_hf_from(*dir, sources);
    if (fs::is_regular_file(p / kWeightsFile)) return load_h5_from((p / kWeightsFile).string(), sources);
    if (fs::is_regular_file(p / kSafetensorsFile))
      return load_exported_safetensors((p / kSafetensorsFile).string(), sources);
    return load_h5_from(resolve_checkpoint(path), sources);  // throws: no checkpoint there
  }
  if (std::optional<std::string> dir = hf_model_dir(path)) return load_hf_from(*dir, sources);
  if (p.extension() == ".safetensors") return load_exported_safetensors(path, sources);
  return load_h5_from(resolve_checkpoint(path), sources);
}

/// The stored config through the validator; its errors name the file.
Config stored_config(const std::string& yaml, const PartSources& sources) {
  try {
    return parse_config(yaml, sources.config_part);
  } catch (const ConfigError& e) {
    throw ConfigError("'" + sources.config_file + "': " + e.what());
  }
}

const Tensor* find_tensor(const ModelWeights& w, const std::string& name) {
  for (const auto& [n, tensor] : w.checkpoint.model)
    if (n == name) return &tensor;
  return nullptr;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data<float>(), b.data<float>(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

/// A tied model has no lm_head of its own: an exact copy of the embeddings (lat's export writes
/// one for other tools) is dropped; any other lm_head.weight would be silently discarded
/// trained weights, so it is an error.
void settle_tied_lm_head(ModelWeights& w, const PartSources& sources) {
  if (!w.config.model.tie_embeddings) return;
  const Tensor* lm_head = find_tensor(w, "lm_head.weight");
  if (lm_head == nullptr) return;
  const Tensor* embeddings = find_tensor(w, "embeddings.weight");
  if (embeddings == nullptr || !bit_equal(*lm_head, *embeddings))
    throw Error("load_model_weights: '" + w.path + "': tensor 'lm_head.weight' " + shape_str(lm_head->shape()) +
                " is not a copy of 'embeddings.weight' " +
                (embeddings ? shape_str(embeddings->shape()) : std::string("(absent)")) + ", but '" +
                sources.config_file + "' " + sources.config_part +
                " sets model.tie_embeddings: true (a tied model's lm_head is its embeddings)");
  auto& model = w.checkpoint.model;
  model.erase(std::find_if(model.begin(), model.end(), [](const auto& t) { return t.first == "lm_head.weight"; }));
}

/// The tokenizer's ids index the embeddings: more tokens than rows would index past them; fewer
/// than rows, when the vocabulary was taken from the tokenizer (model.vocab_size 0), means
/// the tokenizer is not the one the model was trained with.
void check_tokenizer_size(const ModelWeights& w, const PartSources& sources) {
  const std::optional<Tokenizer> tokenizer = checkpoint_tokenizer(w.checkpoint);
  const Tensor* embeddings = find_tensor(w, "embeddings.weight");
  if (!tokenizer || embeddings == nullptr || embeddings->dim() != 2) return;  // model_from_weights names it
  const int64_t tokens = tokenizer->vocab_size(), rows = embeddings->size(0);
  const bool from_tokenizer = w.config.model.vocab_size == 0;
  if (tokens == rows || (!from_tokenizer && tokens < rows)) return;
  throw Error("load_model_weights: '" + w.path + "': the " + tokenizer->type() + " tokenizer (" + sources.tokenizer +
              ") has " + std::to_string(tokens) + " tokens, but " + tensor_label(w, "embeddings.weight") + " " +
              shape_str(embeddings->shape()) + " has " + std::to_string(rows) + " rows: expected " +
              (from_tokenizer ? "as many tokens as rows (model.vocab_size 0: the vocabulary is the tokenizer's)"
                              : "at most as many tokens as rows"));
}

}  // namespace

std::string tensor_label(const ModelWeights& w, const std::string& name) {
  const auto it = w.tensor_labels.find(name);
  return it == w.tensor_labels.end() ? "'" + name + "'" : it->second;
}

ModelWeights load_model_weights(const std::string& path) {
  PartSources sources;
  ModelWeights w = read_model_files(path, sources);
  w.config = stored_config(w.checkpoint.config_yaml, sources);
  if (sources.export_config_json) {
    w.export_config_json = std::move(sources.export_config_json);
    w.export_config_path = sources.config_file;
  }
  settle_tied_lm_head(w, sources);
  check_tokenizer_size(w, sources);
  // A Hugging Face directory's weights were checked under the file's names (load_hf_model).
  if (w.format != ModelFormat::hf) check_finite_weights(w.checkpoint.model, w.path);
  return w;
}

}  // namespace lat
