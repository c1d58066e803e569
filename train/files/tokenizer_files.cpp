// Tokenizers in checkpoints and exports (tokenizer_files.h).
#include "train/files/tokenizer_files.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>

#include "data/bpe_tokenizer.h"
#include "data/regular_file.h"
#include "data/sentencepiece_tokenizer.h"
#include "lat/error.h"
#include "train/files/atomic_file.h"
#include "train/files/export_layout.h"
#include "train/files/hf_tokenizer.h"
#include "train/files/json_file.h"

namespace lat {

bool is_subword_type(const std::string& type) { return type == "bpe" || type == "sentencepiece"; }

uint64_t max_tokenizer_file_bytes(const std::string& type) {
  LAT_CHECK(is_subword_type(type), "max_tokenizer_file_bytes: expected bpe or sentencepiece, got '" << type << "'");
  return type == "bpe" ? kMaxJsonFileBytes : kMaxSentencePieceModelBytes;
}

Tokenizer subword_tokenizer(const std::string& type, const std::string& contents, const std::string& origin) {
  if (type == "sentencepiece") return Tokenizer::subword(sentencepiece_model(contents, origin));
  LAT_CHECK(type == "bpe", "'" << origin << "': a " << type << " tokenizer, which this lat cannot read");
  return Tokenizer::subword(bpe_model_from_json(contents, origin));
}

namespace {

/// The subword tokenizer last built from or recorded in a checkpoint: loading, exporting and
/// generating ask for a checkpoint's tokenizer several times, and building a large vocabulary
/// takes a second. Keyed by the file's bytes, so a checkpoint with another file never gets it.
class LastSubwordTokenizer {
 public:
  std::optional<Tokenizer> find(const std::string& type, const std::string& file) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    const SubwordModel* model = tokenizer_ ? tokenizer_->subword_model() : nullptr;
    if (model && model->type() == type && model->file_contents() == file) return tokenizer_;
    return std::nullopt;
  }
  void remember(const Tokenizer& tokenizer) {
    const std::lock_guard<std::mutex> lock(mutex_);
    tokenizer_ = tokenizer;
  }

 private:
  mutable std::mutex mutex_;
  std::optional<Tokenizer> tokenizer_;
};

LastSubwordTokenizer& last_subword_tokenizer() {
  static LastSubwordTokenizer last;
  return last;
}

}  // namespace

std::optional<Tokenizer> checkpoint_tokenizer(const Checkpoint& ckpt) {
  if (ckpt.tokenizer_type == "char") return Tokenizer::char_from_vocab(ckpt.tokenizer_vocab);
  if (ckpt.tokenizer_type == "byte") return Tokenizer::byte();
  if (is_subword_type(ckpt.tokenizer_type)) {
    if (std::optional<Tokenizer> known = last_subword_tokenizer().find(ckpt.tokenizer_type, ckpt.tokenizer_file))
      return known;
    Tokenizer built = subword_tokenizer(ckpt.tokenizer_type, ckpt.tokenizer_file, "/tokenizer/file");
    last_subword_tokenizer().remember(built);
    return built;
  }
  return std::nullopt;
}

void set_checkpoint_tokenizer(Checkpoint& ckpt, const std::optional<Tokenizer>& tokenizer) {
  ckpt.tokenizer_vocab.clear();
  ckpt.tokenizer_file.clear();
  if (!tokenizer) {
    ckpt.tokenizer_type = "none";  // bin/h5 token ids: no tokenizer to save
    return;
  }
  ckpt.tokenizer_type = tokenizer->type();
  if (ckpt.tokenizer_type == "char") ckpt.tokenizer_vocab = tokenizer->vocab_string();
  if (const SubwordModel* model = tokenizer->subword_model()) {
    ckpt.tokenizer_file = model->file_contents();
    last_subword_tokenizer().remember(*tokenizer);
  }
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

std::string write_subword_tokenizer_file(const SubwordModel& model, const std::string& dir, const std::string& who) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / model.file_name()).string();
  write_text_atomically(path, model.file_contents(), who);
  for (const char* name : {export_layout::kTokenizerFile, export_layout::kSentencePieceFile}) {
    if (std::string(name) == model.file_name()) continue;
    std::error_code ignored;
    fs::remove(fs::path(dir) / name, ignored);
  }
  return path;
}

void read_tokenizer_json(const std::string& path, Checkpoint& ckpt) {
  const nlohmann::json j = read_json_file(path, "the tokenizer file");
  const std::string where = "load_model_weights: '" + path + "': ";
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error(where + "expected an object with a string 'type'");
  ckpt.tokenizer_type = j["type"].get<std::string>();
  if (ckpt.tokenizer_type == "byte") return;
  if (ckpt.tokenizer_type != "char")
    throw Error(where + "type: expected char or byte, got '" + excerpt(ckpt.tokenizer_type) + "'");
  if (!j.contains("vocab") || !j["vocab"].is_array()) throw Error(where + "expected 'vocab': [characters in id order]");
  // Each entry is one character, so that entry i is id i: an empty or longer entry would
  // shift every later id, a repeated one would make two ids decode alike.
  std::map<std::string, size_t> first_index;
  std::string vocab;
  const nlohmann::json& entries = j["vocab"];
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string entry = where + "vocab entry " + std::to_string(i);
    if (!entries[i].is_string()) throw Error(entry + ": expected a string, got " + json_excerpt(entries[i]));
    const std::string& c = entries[i].get_ref<const std::string&>();
    const size_t characters = static_cast<size_t>(
        std::count_if(c.begin(), c.end(), [](char byte) { return (static_cast<unsigned char>(byte) & 0xC0) != 0x80; }));
    if (characters != 1)
      throw Error(entry + ": expected one character, got " + json_excerpt(entries[i]) + " (" +
                  std::to_string(characters) + " characters)");
    if (const auto [it, added] = first_index.emplace(c, i); !added)
      throw Error(entry + ": " + json_excerpt(entries[i]) + " repeats entry " + std::to_string(it->second));
    // Checkpoints store the vocabulary as one C string: a NUL would fail every later save.
    if (c == std::string(1, '\0')) throw Error(entry + ": expected a character other than NUL");
    vocab += c;
  }
  if (vocab.empty()) throw Error(where + "vocab: expected at least one character, got []");
  try {
    Tokenizer::char_from_vocab(vocab);  // validates the UTF-8 of each character
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
  ckpt.tokenizer_vocab = vocab;
}

namespace {

/// A tokenizer.json: lat's form or a Hugging Face form.
std::optional<Tokenizer> read_tokenizer_json_file(const std::string& path, const std::string& who) {
  std::string text = read_json_file_text(path, "tokenizer file");
  const nlohmann::json json = parse_json_text(text, who + ": '" + path + "'");
  if (json.is_object() && json.contains("type") && !json.contains("model")) {
    Checkpoint ckpt;
    read_tokenizer_json(path, ckpt);
    return checkpoint_tokenizer(ckpt);
  }
  std::string why_not;
  std::optional<Tokenizer> tokenizer = tokenizer_from_hf_json(json, why_not);
  if (tokenizer) return tokenizer;
  // Any other Hugging Face tokenizer.json: a byte-level BPE, or refused naming what lat cannot honour.
  try {
    return Tokenizer::subword(bpe_model_from_json(std::move(text), json, path));
  } catch (const Error& e) {
    throw Error(who + ": " + e.what());
  }
}

}  // namespace

std::optional<Tokenizer> read_tokenizer_file(const std::string& path, const std::string& who) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    const fs::path json = fs::path(path) / "tokenizer.json";
    const fs::path model = fs::path(path) / "tokenizer.model";
    if (fs::exists(json)) return read_tokenizer_json_file(json.string(), who);
    if (fs::exists(model)) return read_tokenizer_file(model.string(), who);
    throw Error(who + ": '" + path + "': a directory with neither a tokenizer.json nor a tokenizer.model");
  }
  if (fs::path(path).extension() == ".model") {
    try {
      return Tokenizer::subword(
          sentencepiece_model(read_bounded_file(path, kMaxSentencePieceModelBytes, "SentencePiece model"), path));
    } catch (const Error& e) {
      throw Error(who + ": " + e.what());
    }
  }
  return read_tokenizer_json_file(path, who);
}

}  // namespace lat
