// Resolving a --tokenizer argument to a Tokenizer (tokenizer_source.h).
#include "train/inference/tokenizer_source.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

#include "data/regular_file.h"
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
/// The files a --tokenizer path may name, for messages about a file that is none of them.
constexpr const char* kTokenizerFiles =
    "a tokenizer.json, a SentencePiece .model, a checkpoint (.h5) or an exported model.safetensors";
/// The magic a GGUF file starts with.
constexpr std::string_view kGgufMagic = "GGUF";

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
  throw ConfigError(std::string(kWho) + ": directory '" + dir +
                    "' holds no tokenizer.json, tokenizer.model, checkpoint (model.h5) or run ('latest', ckpt_*.h5)");
}

/// Refuses a regular file that is none of the tokenizer files lat reads before it is parsed as
/// JSON (whose error would name a byte, not what was wrong): a GGUF file (by name or magic), or
/// a file whose name is not *.json and whose first non-blank byte opens no JSON object or array
/// (a tokenizer.json is an object; an array is left to the reader to name).
void check_looks_like_tokenizer_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;  // the JSON reader reports it in its own words
  char head[4096];
  in.read(head, sizeof head);
  const std::string_view bytes(head, static_cast<size_t>(in.gcount()));
  if (path.extension() == ".gguf" || bytes.starts_with(kGgufMagic))
    throw Error(std::string(kWho) + ": '" + path.string() +
                "' is a GGUF file: lat does not read tokenizers from GGUF files (expected " + kTokenizerFiles + ")");
  if (path.extension() == ".json") return;
  // JSON readers skip a UTF-8 byte order mark, as nlohmann-json does.
  const size_t first = bytes.find_first_not_of(" \t\r\n", bytes.starts_with("\xEF\xBB\xBF") ? 3 : 0);
  if (first == std::string_view::npos && bytes.size() == sizeof head) return;  // blank so far: the reader decides
  if (first == std::string_view::npos || (bytes[first] != '{' && bytes[first] != '['))
    throw Error(std::string(kWho) + ": '" + path.string() + "' is not a tokenizer file lat reads: expected " +
                kTokenizerFiles);
}

}  // namespace

Tokenizer load_tokenizer_source(const std::string& spec, const std::string& data_path) {
  if (spec == "char") {
    if (data_path.empty())
      throw ConfigError(std::string(kWho) +
                        ": --tokenizer char: needs --data FILE, the text whose characters are "
                        "the vocabulary");
    const std::string text = read_tokenizer_text_file(data_path, "the --data file");
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
  if (path.extension() != ".model" && fs::is_regular_file(status)) check_looks_like_tokenizer_json(path);
  return from_tokenizer_file(spec);
}

std::string read_tokenizer_text_file(const std::string& path, const std::string& what) {
  if (const std::optional<std::string> kind = non_regular_file_kind(path))
    throw Error(std::string(kWho) + ": " + what + " '" + path + "' " + *kind + ", expected a regular file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    throw Error(std::string(kWho) + ": cannot open " + what + " '" + path + "': " + std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) bytes.append(buffer, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw Error(std::string(kWho) + ": error while reading " + what + " '" + path + "'");
  return bytes;
}

}  // namespace lat
