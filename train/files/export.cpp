// `lat export` and loading exports back (formats in export.h).
#include "train/files/export.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <hdf5.h>

#include "data/tokenizer.h"
#include "lat/tape.h"
#include "lat/version.h"
#include "layers/swiglu.h"
#include "train/files/model_reader.h"
#include "train/files/safetensors.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

constexpr const char* kSafetensorsFile = "model.safetensors";
constexpr const char* kWeightsFile = "model.h5";
constexpr const char* kConfigFile = "config.json";
constexpr const char* kTokenizerFile = "tokenizer.json";
constexpr const char* kCheckLogitsFile = "check_logits.safetensors";

std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("load_model_weights: cannot open " + what + " '" + path + "': " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

/// Writes `text` to `path` through `<path>.tmp` and a rename.
void write_text(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw Error("export: cannot write '" + tmp + "': " + std::strerror(errno));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error("export: cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
}

nlohmann::json parse_json(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("load_model_weights: '" + path + "' is not valid JSON: " + e.what());
  }
}

// ---- reading ------------------------------------------------------------------------------

ModelWeights load_h5(const std::string& path) {
  ModelWeights w;
  w.path = path;
  w.checkpoint = load_checkpoint(path);
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

void read_tokenizer_json(const std::string& path, Checkpoint& ckpt) {
  const nlohmann::json j = parse_json(read_text(path, "the tokenizer file"), path);
  const std::string where = "load_model_weights: '" + path + "': ";
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error(where + "expected an object with a string 'type'");
  ckpt.tokenizer_type = j["type"].get<std::string>();
  if (ckpt.tokenizer_type == "byte") return;
  if (ckpt.tokenizer_type != "char") throw Error(where + "type: expected char or byte, got '" + ckpt.tokenizer_type + "'");
  if (!j.contains("vocab") || !j["vocab"].is_array()) throw Error(where + "expected 'vocab': [characters in id order]");
  for (const auto& c : j["vocab"]) {
    if (!c.is_string()) throw Error(where + "vocab: expected strings, got " + c.dump());
    ckpt.tokenizer_vocab += c.get<std::string>();
  }
  Tokenizer::char_from_vocab(ckpt.tokenizer_vocab);  // validates: UTF-8, no repeats
}

ModelWeights load_exported_safetensors(const std::string& path) {
  ModelWeights w;
  w.path = path;
  Checkpoint& ckpt = w.checkpoint;
  const SafetensorsFile file = load_safetensors(path);
  const fs::path dir = fs::path(path).parent_path();
  const std::string config_path = (dir / kConfigFile).string();
  const nlohmann::json config = parse_json(read_text(config_path, "the config beside '" + path + "'"), config_path);
  if (!config.is_object() || !config.contains("lat_config") || !config["lat_config"].is_string())
    throw Error("load_model_weights: '" + config_path +
                "': no string 'lat_config' (the resolved lat config; written by lat export)");
  ckpt.config_yaml = config["lat_config"].get<std::string>();
  const Config parsed = parse_config(ckpt.config_yaml, config_path);
  const std::string tokenizer_path = (dir / kTokenizerFile).string();
  ckpt.tokenizer_type = "none";  // as the trainer saves a model trained on token ids
  if (fs::exists(tokenizer_path)) read_tokenizer_json(tokenizer_path, ckpt);

  ckpt.step = metadata_number<int64_t>(file, "step", 0);
  ckpt.tokens_seen = metadata_number<int64_t>(file, "tokens_seen", 0);
  ckpt.val_loss = metadata_number<double>(file, "val_loss", ckpt.val_loss);
  ckpt.best_val_loss = metadata_number<double>(file, "best_val_loss", ckpt.best_val_loss);
  ckpt.world_size = metadata_number<int64_t>(file, "world_size", 1);
  if (auto it = file.metadata.find("lat_version"); it != file.metadata.end()) ckpt.lat_version = it->second;
  if (auto it = file.metadata.find("created"); it != file.metadata.end()) ckpt.created = it->second;
  if (auto it = file.metadata.find("frozen"); it != file.metadata.end()) {
    const nlohmann::json frozen = parse_json(it->second, path + " __metadata__ frozen");
    if (!frozen.is_array()) throw Error("load_model_weights: '" + path + "': __metadata__ 'frozen': expected a JSON list");
    for (const auto& name : frozen) {
      if (!name.is_string()) throw Error("load_model_weights: '" + path + "': __metadata__ 'frozen': expected names");
      ckpt.frozen.push_back(name.get<std::string>());
    }
  }
  for (const auto& [name, tensor] : file.tensors) {
    // The tied copy exists for other tools; lat's model has no lm_head then.
    if (parsed.model.tie_embeddings && name == "lm_head.weight") continue;
    ckpt.model.emplace_back(name, tensor);
  }
  return w;
}

// ---- writing ------------------------------------------------------------------------------

int64_t vocab_size_of(const ModelWeights& w) {
  for (const auto& [name, tensor] : w.checkpoint.model)
    if (name == "embeddings.weight" && tensor.dim() == 2) return tensor.size(0);
  throw Error("export: '" + w.path + "' has no 2-D tensor 'embeddings.weight'");
}

/// The model of `w`'s config with `w`'s weights: checks that every tensor matches the config.
std::unique_ptr<HybridLM> build_model(const ModelWeights& w, const Config& config) {
  Generator gen(0);
  auto model = std::make_unique<HybridLM>(hybrid_lm_config(config.model, vocab_size_of(w)), gen);
  load_weights(*model, w.checkpoint.model, w.path);
  return model;
}

nlohmann::ordered_json tokenizer_json(const Checkpoint& ckpt) {
  nlohmann::ordered_json j;
  j["type"] = ckpt.tokenizer_type;
  if (ckpt.tokenizer_type == "byte") {
    j["vocab_size"] = 256;
    return j;
  }
  const Tokenizer tokenizer = Tokenizer::char_from_vocab(ckpt.tokenizer_vocab);
  nlohmann::ordered_json vocab = nlohmann::ordered_json::array();
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) vocab.push_back(tokenizer.decode_one(id));
  j["vocab"] = vocab;
  return j;
}

std::map<std::string, std::string> export_metadata(const Checkpoint& ckpt) {
  auto number = [](double x) {
    std::ostringstream s;
    s.precision(17);
    s << x;
    return s.str();
  };
  // "format": "pt" is what PyTorch loaders (transformers) expect of a safetensors checkpoint.
  return {{"format", "pt"},
          {"step", std::to_string(ckpt.step)},
          {"tokens_seen", std::to_string(ckpt.tokens_seen)},
          {"val_loss", number(ckpt.val_loss)},
          {"best_val_loss", number(ckpt.best_val_loss)},
          {"world_size", std::to_string(ckpt.world_size)},
          {"lat_version", ckpt.lat_version.empty() ? std::string(version()) : ckpt.lat_version},
          {"created", ckpt.created},
          {"frozen", nlohmann::json(ckpt.frozen).dump()}};
}

void write_safetensors_export(const ModelWeights& w, const Config& config, const ExportOptions& options,
                              std::vector<std::string>& written) {
  std::vector<std::pair<std::string, Tensor>> tensors = w.checkpoint.model;
  if (config.model.tie_embeddings) {
    for (const auto& [name, tensor] : w.checkpoint.model)
      if (name == "embeddings.weight") tensors.emplace_back("lm_head.weight", tensor);
  }
  const fs::path dir(options.out_dir);
  const std::string model_path = (dir / kSafetensorsFile).string();
  save_safetensors(model_path, tensors, parse_safetensors_dtype(options.dtype), export_metadata(w.checkpoint));
  written.push_back(model_path);
  const std::string config_path = (dir / kConfigFile).string();
  write_text(config_path,
             model_config_json(config, vocab_size_of(w), w.checkpoint.tokenizer_type, options.dtype).dump(2) + "\n");
  written.push_back(config_path);
  const std::string tokenizer_path = (dir / kTokenizerFile).string();
  if (w.checkpoint.tokenizer_type != "char" && w.checkpoint.tokenizer_type != "byte") {
    std::error_code ec;
    fs::remove(tokenizer_path, ec);  // a stale one from an earlier export would describe another model
  } else {
    write_text(tokenizer_path, tokenizer_json(w.checkpoint).dump(2) + "\n");
    written.push_back(tokenizer_path);
  }
}

/// save_checkpoint without the training-only groups: written under a temporary name, /rng
/// and /data unlinked, then renamed into place.
void write_h5_weights(const ModelWeights& w, const ExportOptions& options, std::vector<std::string>& written) {
  const std::string path = (fs::path(options.out_dir) / kWeightsFile).string();
  const std::string partial = path + ".partial";
  save_checkpoint(partial, w.checkpoint);
  hid_t file = H5Fopen(partial.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  bool ok = file >= 0;
  for (const char* group : {"rng", "data"})
    if (ok && H5Lexists(file, group, H5P_DEFAULT) > 0) ok = H5Ldelete(file, group, H5P_DEFAULT) >= 0;
  if (file >= 0) ok = H5Fclose(file) >= 0 && ok;
  std::error_code ec;
  if (!ok) {
    fs::remove(partial, ec);
    throw Error("export: cannot remove the training state from '" + partial + "'");
  }
  fs::rename(partial, path, ec);
  if (ec) throw Error("export: cannot rename '" + partial + "' to '" + path + "': " + ec.message());
  written.push_back(path);
}

/// lat's logits for `tokens` from the export just written, read back (check_logits.safetensors).
void write_check_logits(const std::string& export_file, const std::vector<int64_t>& tokens, const std::string& out_dir,
                        std::vector<std::string>& written) {
  const ModelWeights w = load_model_weights(export_file);
  const Config config = parse_config(w.checkpoint.config_yaml, w.path);
  const std::unique_ptr<HybridLM> model = build_model(w, config);
  const int64_t T = static_cast<int64_t>(tokens.size()), V = model->vocab_size();
  NoGradGuard no_grad;
  const Tensor ids = Tensor::from_vector(tokens, {1, T});
  const Tensor logits = model->forward(ids).reshape({T, V});
  std::vector<float> step_logits;
  HybridLMState state = model->make_states(1);
  for (int64_t t = 0; t < T; ++t) {
    const Tensor id = Tensor::from_vector(std::vector<int64_t>{tokens[static_cast<size_t>(t)]}, {1, 1});
    const std::vector<float> row = model->step(id, state).to_vector<float>();
    step_logits.insert(step_logits.end(), row.begin(), row.end());
  }
  std::vector<float> ids_f32(tokens.begin(), tokens.end());
  const std::string path = (fs::path(out_dir) / kCheckLogitsFile).string();
  save_safetensors(path, {{"tokens", Tensor::from_vector(ids_f32, {T})},
                          {"logits", logits},
                          {"logits_step", Tensor::from_vector(step_logits, {T, V})}});
  written.push_back(path);
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

nlohmann::ordered_json model_config_json(const Config& config, int64_t vocab_size, const std::string& tokenizer_type,
                                         const std::string& dtype) {
  const ModelConfig& m = config.model;
  const int64_t mlp_hidden = swiglu_hidden_size(m.d_model, m.mlp_ratio);
  nlohmann::ordered_json j;
  j["architectures"] = {"HybridLMForCausalLM"};
  j["model_type"] = "lat_hybrid";
  j["torch_dtype"] = dtype == "bf16" ? "bfloat16" : "float32";
  j["vocab_size"] = vocab_size;
  j["d_model"] = m.d_model;
  j["n_layers"] = m.n_layers;
  j["n_heads"] = m.n_heads;
  j["head_dim"] = m.head_dim;
  j["expand_v"] = m.expand_v;
  j["value_head_dim"] = static_cast<int64_t>(static_cast<double>(m.head_dim) * m.expand_v);
  j["layers"] = layer_mixers(m);
  j["mlp_ratio"] = m.mlp_ratio;
  j["mlp_hidden_size"] = mlp_hidden;
  j["norm_eps"] = m.norm_eps;
  j["tie_embeddings"] = m.tie_embeddings;
  j["attn"] = {{"window_size", m.attn.window_size}, {"n_kv_heads", m.attn.n_kv_heads}, {"rope_theta", m.attn.rope_theta}};
  j["linear"] = {{"feature_map", m.linear.feature_map}, {"normalize", m.linear.normalize},
                 {"use_short_conv", m.linear.use_short_conv}, {"conv_size", m.linear.conv_size},
                 {"use_gate", m.linear.use_gate}, {"chunk_size", m.linear.chunk_size}};
  // The names Hugging Face configs use for the same numbers.
  j["hidden_size"] = m.d_model;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.attn.n_kv_heads;
  j["intermediate_size"] = mlp_hidden;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.attn.rope_theta;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["tokenizer_type"] = tokenizer_type;
  j["lat_version"] = version();
  j["lat_config"] = to_yaml(config);
  return j;
}

std::vector<std::string> export_model(const ExportOptions& options) {
  if (options.format != "safetensors" && options.format != "h5-weights")
    throw ConfigError("export: --format: expected safetensors or h5-weights, got '" + options.format + "'");
  if (options.dtype != "f32" && options.dtype != "bf16")
    throw ConfigError("export: --dtype: expected f32 or bf16, got '" + options.dtype + "'");
  if (options.format == "h5-weights" && options.dtype != "f32")
    throw ConfigError("export: --dtype " + options.dtype + ": h5-weights stores f32 (checkpoint layout); use "
                      "--format safetensors for bf16");
  if (options.out_dir.empty()) throw ConfigError("export: --out: expected a directory");

  const ModelWeights w = load_model_weights(options.checkpoint);
  const Config config = parse_config(w.checkpoint.config_yaml, w.path);
  // Every tensor present with its config's shape, and nothing else.
  const int64_t vocab_size = build_model(w, config)->vocab_size();
  for (int64_t id : options.check_tokens)  // before any file is written
    if (id < 0 || id >= vocab_size)
      throw ConfigError("export: --check-tokens: id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(vocab_size) + ")");
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) throw Error("export: cannot create --out directory '" + options.out_dir + "': " + ec.message());

  std::vector<std::string> written;
  if (options.format == "safetensors")
    write_safetensors_export(w, config, options, written);
  else
    write_h5_weights(w, options, written);
  if (!options.check_tokens.empty()) write_check_logits(written.front(), options.check_tokens, options.out_dir, written);
  return written;
}

}  // namespace lat
