// Resolving a --tokenizer argument to a Tokenizer (tokenizer_source.h).
#include "train/inference/tokenizer_source.h"

#include <filesystem>
#include <optional>

#include "data/token_files.h"
#include "lat/error.h"
#include "train/config/config_types.h"
#include "train/files/checkpoint.h"
#include "train/files/export_layout.h"
#include "train/files/run_dir.h"
#include "train/files/tokenizer_files.h"

namespace lat {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWho = "lat tokenizer";

[[noreturn]] void no_tokenizer(const std::string& path) {
  throw Error(std::string(kWho) + ": '" + path +
              "' carries no tokenizer: the model was trained on token ids (give ids, not text)");
}

/// A tokenizer file (tokenizer.json or a SentencePiece .model).
Tokenizer from_tokenizer_file(const std::string& path) {
  const std::optional<Tokenizer> tokenizer = read_tokenizer_file(path, kWho);
  if (!tokenizer) no_tokenizer(path);
  return *tokenizer;
}

/// A checkpoint's /tokenizer (its tensors are not read).
Tokenizer from_checkpoint(const std::string& path) {
  const Checkpoint ckpt = load_checkpoint(path, CheckpointParts::tokenizer_only);
  const std::optional<Tokenizer> tokenizer = checkpoint_tokenizer(ckpt);
  if (!tokenizer) no_tokenizer(path);
  return *tokenizer;
}

/// A run directory (its latest checkpoint; first, as load_model_weights looks), else an export
/// or Hugging Face directory (its tokenizer.json, else its tokenizer.model, else its model.h5).
Tokenizer from_directory(const std::string& dir) {
  if (std::optional<std::string> latest = find_latest_checkpoint(dir)) return from_checkpoint(*latest);
  const fs::path tokenizer_json = fs::path(dir) / export_layout::kTokenizerFile;
  if (fs::exists(tokenizer_json)) return from_tokenizer_file(tokenizer_json.string());
  const fs::path tokenizer_model = fs::path(dir) / "tokenizer.model";
  if (fs::exists(tokenizer_model)) return from_tokenizer_file(tokenizer_model.string());
  const fs::path weights = fs::path(dir) / export_layout::kWeightsFile;
  if (fs::exists(weights)) return from_checkpoint(weights.string());
  // An export of a model trained on token ids has its config.json and no tokenizer.json.
  if (fs::exists(fs::path(dir) / export_layout::kConfigFile)) no_tokenizer(dir);
  return from_checkpoint(resolve_checkpoint(dir));
}

}  // namespace

Tokenizer load_tokenizer_source(const std::string& spec, const std::string& data_path) {
  if (spec == "char") {
    if (data_path.empty())
      throw ConfigError(std::string(kWho) +
                        ": --tokenizer char: needs --data FILE, the text whose characters are "
                        "the vocabulary");
    const std::string text = read_text_file(data_path);
    if (text.empty()) throw Error(std::string(kWho) + ": --data '" + data_path + "' is empty");
    // lat train refuses it too: a char vocabulary is stored as one C string.
    if (const size_t nul = text.find('\0'); nul != std::string::npos)
      throw Error(std::string(kWho) + ": --data '" + data_path + "': NUL byte at offset " + std::to_string(nul) +
                  ": not text for the char tokenizer");
    return Tokenizer::char_from_text(text);
  }
  if (!data_path.empty())
    throw ConfigError(std::string(kWho) + ": --data: only --tokenizer char takes a text, got --tokenizer '" + spec +
                      "'");
  if (spec == "byte") return Tokenizer::byte();
  std::error_code ec;
  const fs::file_status status = fs::status(spec, ec);
  if (!fs::exists(status))
    throw ConfigError(std::string(kWho) + ": --tokenizer '" + spec +
                      "': no such file or directory (expected char, byte, a tokenizer.json, a SentencePiece .model, a checkpoint, or a "
                      "run or export directory)");
  if (fs::is_directory(status)) return from_directory(spec);
  const fs::path path(spec);
  if (path.extension() == ".h5") return from_checkpoint(spec);
  // An exported model.safetensors: its tokenizer.json lies beside it.
  if (path.extension() == ".safetensors")
    return from_directory(path.parent_path().empty() ? "." : path.parent_path().string());
  return from_tokenizer_file(spec);
}

}  // namespace lat
