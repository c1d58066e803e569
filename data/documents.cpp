// The document separator and the index of document starts (documents.h).
#include "data/documents.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "lat/error.h"

namespace lat {

std::string double_quoted(const std::string& text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", ch);
          out += hex;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

std::string describe_doc_separator(const DocSeparator& separator) {
  if (const auto* text = std::get_if<std::string>(&separator)) return double_quoted(*text);
  if (const auto* id = std::get_if<int64_t>(&separator)) return std::to_string(*id);
  return "none";
}

std::string doc_separator_mismatch(const DocSeparator& separator, const std::string& format) {
  if (const auto* text = std::get_if<std::string>(&separator)) {
    if (format == "bin" || format == "h5")
      return format + " data takes the token id that ends each document (an unquoted int), got the string " +
             double_quoted(*text);
    if (text->empty()) return "expected a non-empty separator string, got \"\"";
  } else if (const auto* id = std::get_if<int64_t>(&separator)) {
    if (format == "text")
      return "text data takes the string that ends each document (e.g. \"\\n\\n\"), got the token id " +
             std::to_string(*id) + " (quote it to mean the text)";
    if (*id < 0 || *id > std::numeric_limits<int32_t>::max())
      return "expected a token id in [0, " + std::to_string(std::numeric_limits<int32_t>::max()) + "], got " +
             std::to_string(*id);
  }
  return "";
}

std::vector<int32_t> doc_separator_ids(const DocSeparator& separator, const std::optional<Tokenizer>& tokenizer,
                                       const std::string& source) {
  LAT_CHECK(!std::holds_alternative<std::monostate>(separator),
            "doc_separator_ids: data.doc_separator: expected a string or a token id, got none");
  if (const auto* id = std::get_if<int64_t>(&separator)) return {static_cast<int32_t>(*id)};
  const std::string& text = std::get<std::string>(separator);
  LAT_CHECK(tokenizer.has_value(), "doc_separator_ids: data.doc_separator: the string "
                                       << double_quoted(text)
                                       << " needs the text's tokenizer; token data takes a token id");
  std::vector<int64_t> ids;
  try {
    ids = tokenizer->encode(text);
  } catch (const Error& e) {
    LAT_CHECK(false, "doc_separator_ids: data.doc_separator " << double_quoted(text) << " does not occur in " << source
                                                              << ": its " << tokenizer->type()
                                                              << " tokenizer cannot encode it (" << e.what() << ")");
  }
  return {ids.begin(), ids.end()};
}

DocumentIndex::DocumentIndex(const std::vector<int32_t>& tokens, const std::vector<int32_t>& separator) {
  LAT_CHECK(!separator.empty(), "DocumentIndex: data.doc_separator: expected at least one token, got none");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t width = static_cast<int64_t>(separator.size());
  for (int64_t i = 0; i + width <= n;) {
    if (std::equal(separator.begin(), separator.end(), tokens.begin() + i)) {
      i += width;
      if (i < n) starts_.push_back(i);
    } else {
      ++i;
    }
  }
}

std::span<const int64_t> DocumentIndex::starts_in(int64_t begin, int64_t end) const {
  const auto first = std::upper_bound(starts_.begin(), starts_.end(), begin);
  const auto last = std::upper_bound(first, starts_.end(), end);
  return {first, last};
}

}  // namespace lat
