// Byte and char tokenizers, and the subword models behind bpe and sentencepiece.
#include "data/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "data/utf8.h"
#include "lat/error.h"

namespace lat {

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

Tokenizer Tokenizer::subword(std::shared_ptr<const SubwordModel> model) {
  LAT_CHECK(model != nullptr, "Tokenizer::subword: expected a subword model, got none");
  Tokenizer t;
  t.type_ = model->type();
  t.subword_ = std::move(model);
  return t;
}

int64_t Tokenizer::vocab_size() const {
  if (subword_) return subword_->vocab_size();
  return type_ == "byte" ? 256 : static_cast<int64_t>(chars_.size());
}

bool Tokenizer::has_token(int64_t id) const {
  if (subword_) return subword_->has_token(id);
  return id >= 0 && id < vocab_size();
}

std::string Tokenizer::vocab_string() const {
  LAT_CHECK(type_ == "char", "Tokenizer::vocab_string: only the char tokenizer has a vocabulary string, this is "
                                 << type_);
  std::string out;
  for (char32_t cp : chars_) append_utf8(out, cp);
  return out;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  if (subword_) return subword_->encode(text);
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
  if (subword_) return subword_->decode({id});
  if (type_ == "byte") return std::string(1, static_cast<char>(id));
  std::string out;
  append_utf8(out, chars_[id]);
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  if (subword_) return subword_->decode(ids);
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) out += decode_one(id);
  return out;
}

}  // namespace lat
