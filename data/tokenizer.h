// Tokenizers: "byte" (ids are the bytes 0..255), "char" (ids index the sorted distinct
// Unicode characters of a text; the vocabulary is saved with the checkpoint), and the subword
// tokenizers read from files ("bpe": a Hugging Face tokenizer.json; "sentencepiece": a .model),
// whose file is saved with the checkpoint.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/subword_model.h"

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
  /// A tokenizer read from a file (bpe or sentencepiece). Throws lat::Error when `model` is null.
  static Tokenizer subword(std::shared_ptr<const SubwordModel> model);

  /// "char", "byte", "bpe" or "sentencepiece" (the /tokenizer `type` attribute).
  const std::string& type() const { return type_; }
  int64_t vocab_size() const;
  /// The characters in id order, UTF-8 (the checkpoint's /tokenizer/vocab). Char only.
  std::string vocab_string() const;
  /// The subword model of a bpe or sentencepiece tokenizer; nullptr for char and byte.
  const SubwordModel* subword_model() const { return subword_.get(); }

  /// Ids of `text`. Char: throws lat::Error naming a character that is not in the
  /// vocabulary (and its byte offset), or invalid UTF-8.
  std::vector<int64_t> encode(const std::string& text) const;
  /// Text of `ids`. Throws lat::Error naming an id outside [0, vocab_size).
  std::string decode(const std::vector<int64_t>& ids) const;
  /// Text of one id; a byte id gives one raw byte. A subword token's text may depend on its
  /// neighbours (SentencePiece drops a leading space at the start of a text): stream
  /// generated text by decoding the whole sequence, not by concatenating decode_one.
  std::string decode_one(int64_t id) const;
  /// Whether decode accepts `id` (char and byte: every id below vocab_size).
  bool has_token(int64_t id) const;

 private:
  Tokenizer() = default;

  std::string type_;
  std::vector<char32_t> chars_;  // char: id -> code point
  std::vector<int32_t> ids_;     // char: code point -> id, -1 when absent (size = max code point + 1)
  std::shared_ptr<const SubwordModel> subword_;  // bpe, sentencepiece
};

}  // namespace lat
