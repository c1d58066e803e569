// Tokenizers in checkpoints and exports (tokenizer_files.h).
#include "train/files/tokenizer_files.h"

#include "lat/error.h"
#include "train/files/json_file.h"

namespace lat {

std::optional<Tokenizer> checkpoint_tokenizer(const Checkpoint& ckpt) {
  if (ckpt.tokenizer_type == "char") return Tokenizer::char_from_vocab(ckpt.tokenizer_vocab);
  if (ckpt.tokenizer_type == "byte") return Tokenizer::byte();
  return std::nullopt;
}

void set_checkpoint_tokenizer(Checkpoint& ckpt, const std::optional<Tokenizer>& tokenizer) {
  ckpt.tokenizer_vocab.clear();
  if (!tokenizer) {
    ckpt.tokenizer_type = "none";  // bin/h5 token ids: no tokenizer to save
    return;
  }
  ckpt.tokenizer_type = tokenizer->type();
  if (ckpt.tokenizer_type == "char") ckpt.tokenizer_vocab = tokenizer->vocab_string();
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

void read_tokenizer_json(const std::string& path, Checkpoint& ckpt) {
  const nlohmann::json j = read_json_file(path, "the tokenizer file");
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

}  // namespace lat
