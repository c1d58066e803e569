// A subword tokenizer read from a file another library defines: a Hugging Face tokenizer.json
// whose model is a byte-level BPE (data/bpe_tokenizer.h), or a SentencePiece .model
// (data/sentencepiece_tokenizer.h). Tokenizer (data/tokenizer.h) holds one behind its
// char/byte interface; checkpoints and exports carry the file it was read from, byte for byte.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lat {

/// Text to ids and back for a vocabulary defined by a file. Immutable after construction and
/// safe to use from several threads at once.
class SubwordModel {
 public:
  virtual ~SubwordModel() = default;

  /// "bpe" (tokenizer.json) or "sentencepiece" (.model): the checkpoint's /tokenizer type.
  virtual const std::string& type() const = 0;
  /// One more than the largest id the vocabulary defines (special and added tokens included).
  virtual int64_t vocab_size() const = 0;
  /// Ids of `text` (UTF-8), as the file's own library gives them (no BOS/EOS added; a
  /// SentencePiece model without byte fallback gives its unknown id for an unknown character,
  /// as sentencepiece does). Throws lat::Error for invalid UTF-8, naming the byte offset.
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  /// Text of `ids`, as the file's own library decodes them (special tokens kept). Throws
  /// lat::Error naming an id the vocabulary does not define.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  /// Whether encode(a + b) == encode(a) + encode(b) whenever `a` ends with '\n' and `b` starts
  /// with a character that is not whitespace: then a long text may be encoded in pieces cut
  /// there, in parallel. True only where the model's pre-tokenization makes it so.
  virtual bool splits_after_newline() const = 0;
  /// Whether `id` has a token (ids in [0, vocab_size) may be holes in a sparse vocabulary).
  virtual bool has_token(int64_t id) const = 0;
  /// The file the model was read from, byte for byte.
  virtual const std::string& file_contents() const = 0;
  /// The name that file takes in an export directory: "tokenizer.json" or "tokenizer.model".
  virtual const char* file_name() const = 0;
};

}  // namespace lat
