// lat tokenizers as llama.cpp tokenizer metadata (gguf_tokenizer.h).
#include "train/files/gguf_tokenizer.h"

#include <cstring>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

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

/// Walks the fields of one protobuf message in wire format (the bytes libsentencepiece already
/// accepted as a ModelProto): varints, 32- and 64-bit values, length-delimited bytes.
class ProtoFields {
 public:
  explicit ProtoFields(std::string_view bytes) : bytes_(bytes) {}

  struct Field {
    uint32_t number = 0, wire_type = 0;
    uint64_t value = 0;      // varint, fixed32 or fixed64 bits
    std::string_view bytes;  // length-delimited
  };

  /// The next field, or false at the end. Throws lat::Error for malformed bytes.
  bool next(Field& f) {
    if (pos_ >= bytes_.size()) return false;
    const uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<uint32_t>(key & 7);
    f.bytes = {};
    switch (f.wire_type) {
      case 0: f.value = varint(); break;
      case 1: f.value = fixed(8); break;
      case 5: f.value = fixed(4); break;
      case 2: {
        const uint64_t n = varint();
        LAT_CHECK(n <= bytes_.size() - pos_, "gguf_vocabulary: SentencePiece model: a field runs past the end");
        f.bytes = bytes_.substr(pos_, n);
        pos_ += n;
        break;
      }
      default: LAT_CHECK(false, "gguf_vocabulary: SentencePiece model: wire type " << f.wire_type << " unexpected");
    }
    return true;
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      LAT_CHECK(pos_ < bytes_.size(), "gguf_vocabulary: SentencePiece model: a varint runs past the end");
      const auto b = static_cast<uint8_t>(bytes_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    LAT_CHECK(false, "gguf_vocabulary: SentencePiece model: a varint longer than 10 bytes");
    return 0;
  }
  uint64_t fixed(size_t n) {
    LAT_CHECK(n <= bytes_.size() - pos_, "gguf_vocabulary: SentencePiece model: a value runs past the end");
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }

  std::string_view bytes_;
  size_t pos_ = 0;
};

/// A SentencePiece .model (sentencepiece_model.proto's ModelProto: pieces = 1 {piece = 1,
/// score = 2, type = 3}, trainer_spec = 2 {model_type = 3}, normalizer_spec = 3 {name = 1,
/// precompiled_charsmap = 2, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
/// escape_whitespaces = 5}) as llama.cpp's "llama" tokenizer: the piece types are llama.cpp's
/// token types. That tokenizer merges adjacent pieces by score, as SentencePiece's BPE (and
/// char) models do, escapes spaces always and normalizes nothing.
GgufVocabulary sentencepiece_vocabulary(const SubwordModel& model) {
  GgufVocabulary v;
  v.model = "llama";
  int64_t model_type = 1;  // unigram, the proto's default
  std::string normalizer;
  bool charsmap = false, escape_whitespaces = true;
  v.add_space_prefix = true;
  v.remove_extra_whitespaces = true;
  ProtoFields top(model.file_contents());
  ProtoFields::Field f;
  while (top.next(f)) {
    if (f.number == 1 && f.wire_type == 2) {
      std::string piece;
      float score = 0.0f;
      int32_t type = static_cast<int32_t>(GgufTokenType::normal);
      ProtoFields fields(f.bytes);
      ProtoFields::Field p;
      while (fields.next(p)) {
        if (p.number == 1 && p.wire_type == 2) piece = std::string(p.bytes);
        if (p.number == 2 && p.wire_type == 5) std::memcpy(&score, &p.value, sizeof(score));
        if (p.number == 3 && p.wire_type == 0) type = static_cast<int32_t>(p.value);
      }
      v.tokens.push_back(piece);
      v.scores.push_back(score);
      v.token_types.push_back(type);
    } else if (f.number == 2 && f.wire_type == 2) {
      ProtoFields fields(f.bytes);
      ProtoFields::Field t;
      while (fields.next(t))
        if (t.number == 3 && t.wire_type == 0) model_type = static_cast<int64_t>(t.value);
    } else if (f.number == 3 && f.wire_type == 2) {
      ProtoFields fields(f.bytes);
      ProtoFields::Field n;
      while (fields.next(n)) {
        if (n.number == 1 && n.wire_type == 2) normalizer = std::string(n.bytes);
        if (n.number == 2 && n.wire_type == 2) charsmap = !n.bytes.empty();
        if (n.number == 3 && n.wire_type == 0) v.add_space_prefix = n.value != 0;
        if (n.number == 4 && n.wire_type == 0) v.remove_extra_whitespaces = n.value != 0;
        if (n.number == 5 && n.wire_type == 0) escape_whitespaces = n.value != 0;
      }
    }
  }
  const std::string who = std::string(kWho) + "sentencepiece: ";
  if (model_type != 2 && model_type != 4)
    throw ConfigError(who + (model_type == 1 ? "a unigram" : "a word") +
                      " model: llama.cpp's llama tokenizer merges pieces by score, as SentencePiece's bpe and char "
                      "models do (expected model_type bpe)");
  if (charsmap)
    throw ConfigError(who + "normalization rule '" + normalizer +
                      "': llama.cpp's llama tokenizer does not normalize text (expected identity)");
  if (!escape_whitespaces)
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
