// Tokenizers: "byte" (ids are the bytes 0..255) and "char" (ids index the sorted distinct
// Unicode characters of a text; the vocabulary is saved with the checkpoint).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lat {

/// Maps text to token ids and back. Cheap to copy.
class Tokenizer {
 public:
  /// ids = the UTF-8 bytes of the text, vocab_size 256.
  static Tokenizer byte();
  /// Vocabulary = the sorted distinct code points of `text` (UTF-8). Throws lat::Error on
  /// invalid UTF-8 (naming the byte offset) or an empty text.
  static Tokenizer char_from_text(const std::string& text);
  /// The inverse of vocab_string(): `vocab` lists the characters in id order (UTF-8).
  /// Throws lat::Error when it is empty, not valid UTF-8, or repeats a character.
  static Tokenizer char_from_vocab(const std::string& vocab);
  /// "byte" -> byte(); "char" -> char_from_text(text). Throws lat::Error naming
  /// data.tokenizer for another type.
  static Tokenizer create(const std::string& type, const std::string& text);

  /// "char" or "byte" (the /tokenizer `type` attribute).
  const std::string& type() const { return type_; }
  int64_t vocab_size() const;
  /// The characters in id order, UTF-8 (the checkpoint's /tokenizer/vocab). Char only.
  std::string vocab_string() const;

  /// Ids of `text`. Char: throws lat::Error naming a character that is not in the
  /// vocabulary (and its byte offset), or invalid UTF-8.
  std::vector<int64_t> encode(const std::string& text) const;
  /// Text of `ids`. Throws lat::Error naming an id outside [0, vocab_size).
  std::string decode(const std::vector<int64_t>& ids) const;
  /// Text of one id (for streaming generation); a byte id gives one raw byte.
  std::string decode_one(int64_t id) const;

 private:
  Tokenizer() = default;

  std::string type_;
  std::vector<char32_t> chars_;  // char: id -> code point
  std::vector<int32_t> ids_;     // char: code point -> id, -1 when absent (size = max code point + 1)
};

}  // namespace lat
