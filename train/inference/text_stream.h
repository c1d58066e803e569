// Printing the text of a growing sequence of subword ids as it grows. A subword token's text
// may depend on its neighbours (SentencePiece drops the space of a text's first token) and may
// hold part of a UTF-8 character (a byte-fallback or byte-level token; decoders show a
// partial character as U+FFFD until the rest arrives), so the text is not the concatenation
// of each token's: each step decodes the whole sequence and prints what it adds to the text
// printed so far, holding back a partial character at its end.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace lat {

/// The text of `prompt` ids and of each id pushed after them; everything returned by
/// printed_prompt(), push() and finish() concatenates to tokenizer.decode(all ids) whenever
/// each step's decoding extends the previous one (what decoders do).
class TextStream {
 public:
  /// Keeps `tokenizer` by reference: it must outlive the stream.
  TextStream(const Tokenizer& tokenizer, std::vector<int64_t> prompt);

  /// The text of the prompt ids (printed first).
  const std::string& printed_prompt() const { return prompt_text_; }
  /// Appends `id`; returns the text that may be printed now (often "", while a character is
  /// incomplete).
  std::string push(int64_t id);
  /// The text held back so far, once no id follows.
  std::string finish();

 private:
  /// The bytes of `text` from printed_ to `end` (none when end <= printed_); moves printed_ there.
  std::string take(const std::string& text, size_t end);

  const Tokenizer& tokenizer_;
  std::vector<int64_t> ids_;
  std::string prompt_text_;
  size_t printed_ = 0;  // bytes of the decoded text printed so far
};

/// How many bytes of `text` end before its trailing partial UTF-8 sequence and trailing U+FFFD
/// characters (a decoder's stand-in for a partial character): the part that is final.
size_t settled_length(const std::string& text);

}  // namespace lat
