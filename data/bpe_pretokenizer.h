// The text side of a Hugging Face tokenizer.json (data/bpe_tokenizer.h): its normalizer and
// pre-tokenizer, run as Hugging Face tokenizers runs them, so that the words lat's BPE model
// sees are the words tokenizers' model sees.
//
//   normalizer:    null, NFC (through utf8proc), or a Sequence of NFC.
//   pre_tokenizer: Split steps (a Regex or String pattern; behavior Isolated or Removed; invert
//                  false) and Digits steps, then one ByteLevel step (add_prefix_space; use_regex
//                  with GPT-2's pattern; trim_offsets only moves offsets) that maps each word's
//                  bytes to the byte-level alphabet (data/byte_level.h): a ByteLevel alone or
//                  last in a Sequence.
// Regexes run through PCRE2 with UTF and Unicode properties (tokenizers uses Oniguruma; the
// GPT-2, Llama-3, Qwen2 and Qwen3.5 patterns mean the same in both).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace lat {

/// Throws lat::Error "'<origin>': <key>: <what>": the one form of a tokenizer.json refusal.
[[noreturn]] void throw_tokenizer_json_error(const std::string& origin, const std::string& key, const std::string& what);

/// `value` for an error message: its compact JSON, cut to 80 bytes with "...".
std::string tokenizer_json_excerpt(const nlohmann::json& value);

class CompiledRegex;

/// A tokenizer.json's normalizer and pre-tokenizer. Immutable; safe to use from several threads.
class BpePretokenizer {
 public:
  /// Reads the tokenizer.json keys "normalizer" and "pre_tokenizer" (`normalizer` and
  /// `pre_tokenizer`, either may be null JSON). Throws lat::Error (throw_tokenizer_json_error)
  /// naming the key path and the value lat does not read.
  BpePretokenizer(const nlohmann::json& normalizer, const nlohmann::json& pre_tokenizer, const std::string& origin);
  ~BpePretokenizer();
  BpePretokenizer(BpePretokenizer&&) noexcept;

  /// `text` (valid UTF-8) through the normalizer (itself when there is none or it is all ASCII).
  std::string normalize(std::string_view text) const;
  /// Calls `word` with the bytes of each word of `text` (valid, normalized UTF-8) in order,
  /// before their byte-level mapping: the prefix space added where add_prefix_space asks.
  void split(std::string_view text, const std::function<void(std::string_view)>& word) const;
  /// Whether words never straddle a '\n' followed by a character that is not whitespace, and
  /// the split there does not depend on what follows: true for the Llama-3, Qwen2 and Qwen3.5
  /// Split patterns without a prefix space (GPT-2's pattern puts "\n\n" at the end of a text in
  /// one word, but in two words before a letter).
  bool splits_after_newline() const;

 private:
  struct Step;
  bool nfc_ = false;
  std::vector<Step> steps_;
  bool add_prefix_space_ = false;
  std::unique_ptr<CompiledRegex> byte_level_regex_;  // GPT-2's pattern when use_regex
  bool splits_after_newline_ = false;
};

}  // namespace lat
