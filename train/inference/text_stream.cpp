// Decode the whole sequence, print the settled difference (text_stream.h).
#include "train/inference/text_stream.h"

namespace lat {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Bytes of the UTF-8 sequence a lead byte starts (1 for ASCII and for a stray byte).
size_t sequence_length(unsigned char lead) {
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  if (lead >= 0xE0) return lead <= 0xEF ? 3 : 1;
  if (lead >= 0xC2) return 2;
  return 1;
}

}  // namespace

size_t settled_length(const std::string& text) {
  size_t end = text.size();
  // A partial sequence at the end: its lead byte within the last 3 bytes, asking for more.
  for (size_t back = 1; back <= 3 && back <= end; ++back) {
    const auto byte = static_cast<unsigned char>(text[end - back]);
    if (is_continuation(byte)) continue;
    if (sequence_length(byte) > back) end -= back;
    break;
  }
  while (end >= kReplacementCharacter.size() &&
         std::string_view(text).substr(end - kReplacementCharacter.size(), kReplacementCharacter.size()) ==
             kReplacementCharacter)
    end -= kReplacementCharacter.size();
  return end;
}

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<int64_t> prompt)
    : tokenizer_(tokenizer), ids_(std::move(prompt)), prompt_text_(tokenizer.decode(ids_)) {
  printed_ = prompt_text_.size();
}

std::string TextStream::take(const std::string& text, size_t end) {
  // Printed text cannot be taken back: a decoder that changed it (none does) is not followed.
  if (end <= printed_) return {};
  std::string out = text.substr(printed_, end - printed_);
  printed_ = end;
  return out;
}

std::string TextStream::push(int64_t id) {
  ids_.push_back(id);
  const std::string text = tokenizer_.decode(ids_);
  return take(text, settled_length(text));
}

std::string TextStream::finish() {
  const std::string text = tokenizer_.decode(ids_);
  return take(text, text.size());
}

}  // namespace lat
