// Byte and char tokenizers, with a strict UTF-8 decoder for the char vocabulary.
#include "data/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "lat/error.h"

namespace lat {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;

// Decodes the code point starting at text[pos] and advances pos. Rejects truncated
// sequences, stray continuation bytes, overlong forms, surrogates and values > U+10FFFF.
char32_t next_code_point(const std::string& text, size_t& pos, const char* fn) {
  const size_t start = pos;
  auto byte_at = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte_at(pos++);
  if (lead < 0x80) return lead;
  int extra = lead >= 0xF0 && lead <= 0xF4 ? 3 : lead >= 0xE0 && lead < 0xF0 ? 2 : lead >= 0xC2 && lead < 0xE0 ? 1 : -1;
  LAT_CHECK(extra > 0, fn << ": invalid UTF-8 at byte offset " << start << " (byte 0x" << std::hex
                          << static_cast<int>(lead) << ")");
  char32_t cp = lead & (0x3F >> extra);
  for (int i = 0; i < extra; ++i) {
    LAT_CHECK(pos < text.size() && (byte_at(pos) & 0xC0) == 0x80,
              fn << ": invalid UTF-8 at byte offset " << start << " (truncated sequence)");
    cp = (cp << 6) | (byte_at(pos++) & 0x3F);
  }
  static constexpr char32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
  LAT_CHECK(cp >= kMin[extra] && cp <= kMaxCodePoint && !(cp >= 0xD800 && cp <= 0xDFFF),
            fn << ": invalid UTF-8 at byte offset " << start << " (overlong form, surrogate or out of range)");
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// "'a' (U+0061)", or just "U+000A" for a control character.
std::string describe_char(char32_t cp) {
  char code[16];
  std::snprintf(code, sizeof(code), "U+%04X", static_cast<unsigned>(cp));
  if (cp < 0x20 || cp == 0x7F) return code;
  std::string s = "'";
  append_utf8(s, cp);
  return s + "' (" + code + ")";
}

}  // namespace

Tokenizer Tokenizer::byte() {
  Tokenizer t;
  t.type_ = "byte";
  return t;
}

Tokenizer Tokenizer::char_from_text(const std::string& text) {
  LAT_CHECK(!text.empty(), "Tokenizer::char_from_text: text: expected at least one character, got an empty text");
  std::vector<bool> seen(kMaxCodePoint + 1, false);
  for (size_t pos = 0; pos < text.size();) seen[next_code_point(text, pos, "Tokenizer::char_from_text")] = true;
  std::string vocab;
  for (char32_t cp = 0; cp <= kMaxCodePoint; ++cp)
    if (seen[cp]) append_utf8(vocab, cp);
  return char_from_vocab(vocab);
}

Tokenizer Tokenizer::char_from_vocab(const std::string& vocab) {
  LAT_CHECK(!vocab.empty(), "Tokenizer::char_from_vocab: vocab: expected at least one character, got an empty string");
  Tokenizer t;
  t.type_ = "char";
  for (size_t pos = 0; pos < vocab.size();) t.chars_.push_back(next_code_point(vocab, pos, "Tokenizer::char_from_vocab"));
  t.ids_.assign(*std::max_element(t.chars_.begin(), t.chars_.end()) + 1, -1);
  for (size_t id = 0; id < t.chars_.size(); ++id) {
    char32_t cp = t.chars_[id];
    LAT_CHECK(t.ids_[cp] < 0, "Tokenizer::char_from_vocab: vocab: character " << describe_char(cp)
                                                                             << " appears twice (ids " << t.ids_[cp]
                                                                             << " and " << id << ")");
    t.ids_[cp] = static_cast<int32_t>(id);
  }
  return t;
}

Tokenizer Tokenizer::create(const std::string& type, const std::string& text) {
  if (type == "byte") return byte();
  LAT_CHECK(type == "char", "Tokenizer::create: data.tokenizer: expected char or byte, got '" << type << "'");
  return char_from_text(text);
}

int64_t Tokenizer::vocab_size() const {
  return type_ == "byte" ? 256 : static_cast<int64_t>(chars_.size());
}

std::string Tokenizer::vocab_string() const {
  LAT_CHECK(type_ == "char", "Tokenizer::vocab_string: only the char tokenizer has a vocabulary string, this is "
                                 << type_);
  std::string out;
  for (char32_t cp : chars_) append_utf8(out, cp);
  return out;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  if (type_ == "byte") {
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  for (size_t pos = 0; pos < text.size();) {
    size_t start = pos;
    char32_t cp = next_code_point(text, pos, "Tokenizer::encode");
    int32_t id = cp < ids_.size() ? ids_[cp] : -1;
    LAT_CHECK(id >= 0, "Tokenizer::encode: character " << describe_char(cp) << " at byte offset " << start
                                                       << " is not in the char vocabulary (" << chars_.size()
                                                       << " characters)");
    ids.push_back(id);
  }
  return ids;
}

std::string Tokenizer::decode_one(int64_t id) const {
  LAT_CHECK(id >= 0 && id < vocab_size(), "Tokenizer::decode: id " << id << " is outside [0, " << vocab_size()
                                                                    << ") of the " << type_ << " tokenizer");
  if (type_ == "byte") return std::string(1, static_cast<char>(id));
  std::string out;
  append_utf8(out, chars_[id]);
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) out += decode_one(id);
  return out;
}

}  // namespace lat
