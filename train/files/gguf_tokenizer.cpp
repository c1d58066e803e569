// lat tokenizers as llama.cpp tokenizer metadata (gguf_tokenizer.h).
#include "train/files/gguf_tokenizer.h"

#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "data/sentencepiece_proto.h"
#include "data/subword_model.h"
#include "data/utf8.h"
#include "lat/error.h"
#include "train/config/config_types.h"

namespace lat {
namespace {

constexpr const char* kWho = "export --format gguf: tokenizer ";
constexpr const char* kEndOfText = "<|endoftext|>";
constexpr char32_t kEscapedSpace = 0x2581;  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

/// GPT-2's byte-to-unicode alphabet: printable Latin-1 bytes stand for themselves, the other
/// bytes for U+0100 onwards in byte order, so that every byte is one visible character.
std::vector<std::string> byte_level_alphabet() {
  std::vector<std::string> alphabet(256);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool visible = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    append_utf8(alphabet[static_cast<size_t>(b)], visible ? static_cast<char32_t>(b) : next++);
  }
  return alphabet;
}

/// Pads `v` to `model_vocab_size` tokens ("[PAD<id>]", UNUSED: embedding rows the tokenizer
/// never produces, which llama.cpp still needs a token for).
void pad_to_model(GgufVocabulary& v, int64_t model_vocab_size) {
  for (auto id = static_cast<int64_t>(v.tokens.size()); id < model_vocab_size; ++id) {
    v.tokens.push_back("[PAD" + std::to_string(id) + "]");
    v.token_types.push_back(static_cast<int32_t>(GgufTokenType::unused));
    if (!v.scores.empty()) v.scores.push_back(0.0f);
  }
}

/// Appends the end-of-text control token that BOS, EOS and padding name, or names the
/// vocabulary's own (a byte-level BPE's "<|endoftext|>": llama.cpp needs distinct token texts).
void append_end_of_text(GgufVocabulary& v) {
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (v.tokens[id] == kEndOfText) {
      v.end_of_text_id = static_cast<int64_t>(id);
      v.token_types[id] = static_cast<int32_t>(GgufTokenType::control);
      return;
    }
  v.end_of_text_id = static_cast<int64_t>(v.tokens.size());
  v.tokens.push_back(kEndOfText);
  v.token_types.push_back(static_cast<int32_t>(GgufTokenType::control));
  if (!v.scores.empty()) v.scores.push_back(0.0f);
}

GgufVocabulary char_vocabulary(const Tokenizer& tokenizer) {
  GgufVocabulary v;
  v.model = "llama";
  const std::string chars = tokenizer.vocab_string();
  size_t pos = 0;
  while (pos < chars.size()) {
    const char32_t cp = next_code_point(chars, pos, "gguf_vocabulary");
    if (cp == kEscapedSpace)
      throw ConfigError(std::string(kWho) + "char: the vocabulary holds " + describe_char(cp) +
                        ", which llama.cpp's SentencePiece tokenizer reads as an escaped space "
                        "(expected a vocabulary without it)");
    std::string token;
    append_utf8(token, cp == U' ' ? kEscapedSpace : cp);
    v.tokens.push_back(token);
    v.token_types.push_back(static_cast<int32_t>(GgufTokenType::normal));
    v.scores.push_back(0.0f);
  }
  return v;
}

GgufVocabulary byte_vocabulary() {
  GgufVocabulary v;
  v.model = "gpt2";
  v.pre = "qwen2";  // any byte-level pre-tokenizer: with no merges every byte is its own token
  v.tokens = byte_level_alphabet();
  v.token_types.assign(v.tokens.size(), static_cast<int32_t>(GgufTokenType::normal));
  return v;
}

/// The Split regex of a tokenizer.json pre_tokenizer (itself or inside a Sequence), or nullopt.
std::optional<std::string> split_pattern(const nlohmann::json& pre) {
  if (!pre.is_object()) return std::nullopt;
  if (pre.value("type", "") == "Split" && pre.contains("pattern") && pre["pattern"].is_object() &&
      pre["pattern"].contains("Regex") && pre["pattern"]["Regex"].is_string())
    return pre["pattern"]["Regex"].get<std::string>();
  if (pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array())
    for (const nlohmann::json& p : pre["pretokenizers"])
      if (std::optional<std::string> found = split_pattern(p)) return found;
  return std::nullopt;
}

/// llama.cpp's pre-tokenizer name for a tokenizer.json's Split pattern (none: GPT-2's
/// built-in ByteLevel regex).
std::string pre_tokenizer_name(const std::optional<std::string>& pattern) {
  static const std::map<std::string, std::string> names = {
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "llama-bpe"},
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "qwen2"},
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       "qwen35"},
  };
  if (!pattern) return "gpt-2";
  const auto it = names.find(*pattern);
  if (it == names.end())
    throw ConfigError(std::string(kWho) + "bpe: pre-tokenizer pattern '" + *pattern +
                      "' is none of llama.cpp's (expected GPT-2's, Llama 3's, Qwen2's or Qwen3.5's)");
  return it->second;
}

GgufVocabulary bpe_vocabulary(const SubwordModel& model) {
  const nlohmann::json j = nlohmann::json::parse(model.file_contents(), nullptr, false);
  const auto bad = [](const std::string& what) {
    return ConfigError(std::string(kWho) + "bpe: tokenizer.json " + what);
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object() || j["model"].value("type", "") != "BPE" ||
      !j["model"].contains("vocab") || !j["model"]["vocab"].is_object())
    throw bad("has no BPE model with a vocab (expected a byte-level BPE)");
  GgufVocabulary v;
  v.model = "gpt2";
  v.pre = pre_tokenizer_name(split_pattern(j.value("pre_tokenizer", nlohmann::json())));
  const int64_t n = model.vocab_size();
  v.tokens.assign(static_cast<size_t>(n), "");
  v.token_types.assign(static_cast<size_t>(n), static_cast<int32_t>(GgufTokenType::unused));
  const auto place = [&](const std::string& token, const nlohmann::json& id, GgufTokenType type) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n)
      throw bad("gives token '" + token + "' the id " + id.dump() + " (expected one in [0, " + std::to_string(n) +
                "))");
    v.tokens[id.get<size_t>()] = token;
    v.token_types[id.get<size_t>()] = static_cast<int32_t>(type);
  };
  for (const auto& [token, id] : j["model"]["vocab"].items()) place(token, id, GgufTokenType::normal);
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const nlohmann::json& t : j["added_tokens"])
      if (t.is_object() && t.contains("content") && t["content"].is_string() && t.contains("id"))
        place(t["content"].get<std::string>(), t["id"],
              t.value("special", false) ? GgufTokenType::control : GgufTokenType::user_defined);
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (v.tokens[id].empty()) v.tokens[id] = "[PAD" + std::to_string(id) + "]";
  if (j["model"].contains("merges") && j["model"]["merges"].is_array())
    for (const nlohmann::json& m : j["model"]["merges"]) {
      if (m.is_string())
        v.merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else
        throw bad("has a merge " + m.dump() + " (expected \"left right\" or [left, right])");
    }
  return v;
}

/// A SentencePiece .model as llama.cpp's "llama" tokenizer: the piece types are llama.cpp's
/// token types. That tokenizer merges adjacent pieces by score, as SentencePiece's BPE (and
/// char) models do, escapes spaces always and normalizes nothing.
GgufVocabulary sentencepiece_vocabulary(const SubwordModel& model) {
  const SentencePieceProto proto = read_sentencepiece_proto(model.file_contents());
  GgufVocabulary v;
  v.model = "llama";
  v.add_space_prefix = proto.add_dummy_prefix;
  v.remove_extra_whitespaces = proto.remove_extra_whitespaces;
  for (const SentencePieceProto::Piece& piece : proto.pieces) {
    v.tokens.push_back(piece.piece);
    v.scores.push_back(piece.score);
    v.token_types.push_back(piece.type);
  }
  const std::string who = std::string(kWho) + "sentencepiece: ";
  using Type = SentencePieceModelType;
  if (proto.model_type != Type::bpe && proto.model_type != Type::character)
    throw ConfigError(who + (proto.model_type == Type::unigram ? "a unigram" : "a word") +
                      " model: llama.cpp's llama tokenizer merges pieces by score, as SentencePiece's bpe and char "
                      "models do (expected model_type bpe)");
  if (proto.precompiled_charsmap)
    throw ConfigError(who + "normalization rule '" + proto.normalizer_name +
                      "': llama.cpp's llama tokenizer does not normalize text (expected identity)");
  if (!proto.escape_whitespaces)
    throw ConfigError(who +
                      "escape_whitespaces false: llama.cpp's llama tokenizer always spells spaces as U+2581 "
                      "(expected true)");
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (v.token_types[id] == static_cast<int32_t>(GgufTokenType::unknown) && v.unknown_id < 0)
      v.unknown_id = static_cast<int64_t>(id);
    if (v.tokens[id] == "</s>" && v.token_types[id] == static_cast<int32_t>(GgufTokenType::control))
      v.end_of_text_id = static_cast<int64_t>(id);
  }
  return v;
}

}  // namespace

GgufVocabulary gguf_vocabulary(const Tokenizer& tokenizer, int64_t model_vocab_size) {
  if (tokenizer.vocab_size() > model_vocab_size)
    throw ConfigError(std::string(kWho) + tokenizer.type() + ": " + std::to_string(tokenizer.vocab_size()) +
                      " tokens, more than the model's " + std::to_string(model_vocab_size) +
                      " embedding rows (expected at most as many)");
  GgufVocabulary v;
  if (tokenizer.type() == "char")
    v = char_vocabulary(tokenizer);
  else if (tokenizer.type() == "byte")
    v = byte_vocabulary();
  else if (tokenizer.type() == "bpe" && tokenizer.subword_model() != nullptr)
    v = bpe_vocabulary(*tokenizer.subword_model());
  else if (tokenizer.type() == "sentencepiece" && tokenizer.subword_model() != nullptr)
    v = sentencepiece_vocabulary(*tokenizer.subword_model());
  else
    throw ConfigError(std::string(kWho) + tokenizer.type() + ": not a tokenizer lat's GGUF export writes");
  pad_to_model(v, model_vocab_size);
  if (v.end_of_text_id < 0) append_end_of_text(v);
  return v;
}

void add_gguf_vocabulary(GgufWriter& writer, const GgufVocabulary& v) {
  writer.add_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) writer.add_string("tokenizer.ggml.pre", v.pre);
  writer.add_strings("tokenizer.ggml.tokens", v.tokens);
  writer.add_int32s("tokenizer.ggml.token_type", v.token_types);
  if (!v.scores.empty()) writer.add_float32s("tokenizer.ggml.scores", v.scores);
  if (v.model == "gpt2") writer.add_strings("tokenizer.ggml.merges", v.merges);
  const auto id = static_cast<uint32_t>(v.end_of_text_id);
  writer.add_uint32("tokenizer.ggml.bos_token_id", id);
  writer.add_uint32("tokenizer.ggml.eos_token_id", id);
  writer.add_uint32("tokenizer.ggml.padding_token_id", id);
  writer.add_bool("tokenizer.ggml.add_bos_token", false);
  writer.add_bool("tokenizer.ggml.add_eos_token", false);
  if (v.unknown_id >= 0) writer.add_uint32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unknown_id));
  if (v.model == "llama") {
    writer.add_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
    writer.add_bool("tokenizer.ggml.remove_extra_whitespaces", v.remove_extra_whitespaces);
  }
}

}  // namespace lat
