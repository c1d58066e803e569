// `lat export`: the export writer (export.h, files in export_layout.h).
#include "train/files/export.h"

#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include <hdf5.h>

#include "lat/tape.h"
#include "lat/version.h"
#include "train/config/config.h"
#include "train/files/atomic_file.h"
#include "train/files/config_json.h"
#include "train/files/export_layout.h"
#include "train/files/gguf_export.h"
#include "train/files/hf_config.h"
#include "train/files/hf_export.h"
#include "train/files/model_reader.h"
#include "train/files/run_dir.h"
#include "train/files/safetensors.h"
#include "train/files/tokenizer_files.h"
#include "train/files/trained_model.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

using namespace export_layout;

/// The root attributes of the checkpoint as the safetensors __metadata__ (strings only).
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

/// model.safetensors, config.json and tokenizer.json (none for a model trained on token ids).
void write_safetensors_export(const ModelWeights& w, const Config& config, int64_t vocab_size,
                              const ExportOptions& options, std::vector<std::string>& written) {
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
  const nlohmann::ordered_json config_json =
      model_config_json(config, vocab_size, w.checkpoint.tokenizer_type, options.dtype);
  write_text_atomically(config_path, config_json.dump(2) + "\n", "export");
  written.push_back(config_path);
  const std::string tokenizer_path = (dir / kTokenizerFile).string();
  const std::optional<Tokenizer> tokenizer = checkpoint_tokenizer(w.checkpoint);
  if (tokenizer && tokenizer->subword_model() != nullptr) {
    written.push_back(write_subword_tokenizer_file(*tokenizer->subword_model(), options.out_dir, "export"));
    return;
  }
  std::error_code ec;
  fs::remove(dir / kSentencePieceFile, ec);  // a stale one from an earlier export would describe another model
  if (!tokenizer) {
    fs::remove(tokenizer_path, ec);
  } else {
    write_text_atomically(tokenizer_path, tokenizer_json(w.checkpoint).dump(2) + "\n", "export");
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
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(partial, ec);
    throw Error("export: cannot rename '" + partial + "' to '" + path + "': " + reason);
  }
  written.push_back(path);
}

/// lat's logits for `tokens` from the export just written, read back (check_logits.safetensors).
void write_check_logits(const std::string& export_file, const std::vector<int64_t>& tokens, const std::string& out_dir,
                        std::vector<std::string>& written) {
  const ModelWeights w = load_model_weights(export_file);
  const std::unique_ptr<HybridLM> model = model_from_weights(w);
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

/// --out may be new, empty or an earlier export (it has a config.json), but neither the directory the model is read
/// from (the export would overwrite its own input: an HF directory exported over itself, a
/// model.h5 by --format h5-weights) nor a run directory (it would then hold two models: lat's
/// --checkpoint reads the run's newest checkpoint, other tools the export beside it).
void check_out_dir(const std::string& out_dir, const ModelWeights& w) {
  std::error_code ec;
  const fs::path out(out_dir);
  if (!fs::is_directory(out, ec)) return;  // created, or create_directories names the problem
  const fs::path input = fs::path(w.path).parent_path();
  if (fs::equivalent(out, input.empty() ? fs::path(".") : input, ec))
    throw ConfigError("export: --out '" + out_dir + "' is the directory of the model being exported ('" + w.path +
                      "'): expected another directory (the export would overwrite its input)");
  if (!list_checkpoints(out_dir).checkpoints.empty() || fs::exists(out / "latest", ec))
    throw ConfigError("export: --out '" + out_dir + "' is a run directory (it holds checkpoints): expected another "
                      "directory, e.g. '" + (out / "export").string() +
                      "' (lat would read the run there, other tools the export)");
  // Anything else already there would be overwritten file by file or left beside the export.
  const bool empty = fs::directory_iterator(out, ec) == fs::directory_iterator();
  if (!empty && !fs::exists(out / kConfigFile, ec))
    throw ConfigError("export: --out '" + out_dir + "' holds other files and no earlier export (no " +
                      std::string(kConfigFile) + "): expected a new or empty directory or an earlier export");
}

/// `lat export --format gguf`: --out is a new or earlier .gguf file (never the model read: lat
/// reads no GGUF).
std::vector<std::string> export_gguf(const ExportOptions& options) {
  const GgmlType dtype = parse_gguf_dtype(options.dtype);
  const fs::path out(options.out_dir);
  if (out.extension() != ".gguf")
    throw ConfigError("export: --out '" + options.out_dir + "': expected a file name ending in .gguf for --format gguf");
  if (!options.check_tokens.empty())
    throw ConfigError("export: --check-tokens: lat cannot read a .gguf back (expected --format safetensors, "
                      "h5-weights or hf)");
  std::error_code ec;
  if (fs::is_directory(out, ec))
    throw ConfigError("export: --out '" + options.out_dir + "' is a directory: expected a .gguf file name");
  const ModelWeights w = load_model_weights(options.checkpoint);
  const int64_t vocab_size = model_from_weights(w)->vocab_size();
  check_gguf_expressible(w.config.model, checkpoint_tokenizer(w.checkpoint), vocab_size);  // before any file is written
  if (out.has_parent_path()) {
    fs::create_directories(out.parent_path(), ec);
    if (ec) throw Error("export: cannot create the directory of --out '" + options.out_dir + "': " + ec.message());
  }
  write_gguf_export(w, vocab_size, dtype, options.out_dir);
  return {options.out_dir};
}

}  // namespace

std::vector<std::string> export_model(const ExportOptions& options) {
  if (options.format != "safetensors" && options.format != "h5-weights" && options.format != "hf" &&
      options.format != "gguf")
    throw ConfigError("export: --format: expected safetensors, h5-weights, hf or gguf, got '" + options.format + "'");
  if (options.out_dir.empty()) throw ConfigError("export: --out: expected a directory");
  if (options.format == "gguf") return export_gguf(options);
  if (options.dtype != "f32" && options.dtype != "bf16")
    throw ConfigError("export: --dtype: expected f32 or bf16, got '" + options.dtype + "'");
  if (options.format == "h5-weights" && options.dtype != "f32")
    throw ConfigError("export: --dtype " + options.dtype + ": h5-weights stores f32 (checkpoint layout); use "
                      "--format safetensors for bf16");

  const ModelWeights w = load_model_weights(options.checkpoint);
  const Config& config = w.config;
  // Every tensor present with its config's shape, and nothing else.
  const int64_t vocab_size = model_from_weights(w)->vocab_size();
  if (options.format == "hf") check_hf_expressible(config.model);  // before any file is written
  check_out_dir(options.out_dir, w);
  for (int64_t id : options.check_tokens)  // before any file is written
    if (id < 0 || id >= vocab_size)
      throw ConfigError("export: --check-tokens: id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(vocab_size) + ")");
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) throw Error("export: cannot create --out directory '" + options.out_dir + "': " + ec.message());

  std::vector<std::string> written;
  if (options.format == "safetensors")
    write_safetensors_export(w, config, vocab_size, options, written);
  else if (options.format == "hf")
    write_hf_export(w, vocab_size, parse_safetensors_dtype(options.dtype), options.out_dir, written);
  else
    write_h5_weights(w, options, written);
  if (!options.check_tokens.empty()) write_check_logits(written.front(), options.check_tokens, options.out_dir, written);
  return written;
}

}  // namespace lat
