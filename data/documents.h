// Documents in a token stream (data.doc_separator, data.packing): the separator as the config
// gives it, its token ids, and where each document starts, found once so that a window of the
// stream is cut into its sequences by a binary search.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "data/tokenizer.h"

namespace lat {

/// data.doc_separator: not set, a string that ends each document of text data (e.g. "\n\n"),
/// or the token id that ends each document of bin and h5 token data.
using DocSeparator = std::variant<std::monostate, std::string, int64_t>;

/// `text` as a YAML double-quoted scalar, with escapes for quotes, backslashes and control
/// characters ("\n\n" reads as it is written in a config), for messages.
std::string double_quoted(const std::string& text);

/// The separator as YAML writes it, for messages: "\n\n" (double-quoted, escaped), 50256, or
/// none.
std::string describe_doc_separator(const DocSeparator& separator);

/// What is wrong with `separator` for data of `format` ("text", "bin", "h5"), in one line, or
/// "" when it fits: text takes a non-empty string, bin and h5 a token id in [0, INT32_MAX]. An
/// empty `format` (not known yet) checks only what holds for every format.
std::string doc_separator_mismatch(const DocSeparator& separator, const std::string& format);

/// The token ids of `separator`: a string encoded with `tokenizer` (text data), or the one id.
/// Throws lat::Error naming data.doc_separator when it is not set, when a string comes
/// without a tokenizer, or when the tokenizer cannot encode it (a character that `source`,
/// the corpus named in the message, lacks).
std::vector<int32_t> doc_separator_ids(const DocSeparator& separator, const std::optional<Tokenizer>& tokenizer,
                                       const std::string& source);

/// Where documents start in a token stream: each occurrence of the separator (its token ids,
/// matched left to right without overlap, as str.split does) ends a document, and the next
/// token starts one. The separator stays the last token(s) of the document it ends, so
/// consecutive separators make documents that are only a separator. Positions are offsets in
/// the whole stream (both splits).
class DocumentIndex {
 public:
  /// Scans `tokens` once. Throws lat::Error naming data.doc_separator when `separator` is empty.
  DocumentIndex(const std::vector<int32_t>& tokens, const std::vector<int32_t>& separator);

  /// The positions p with begin < p <= end where a document starts, in increasing order.
  std::span<const int64_t> starts_in(int64_t begin, int64_t end) const;
  /// How many documents start after the first token of the stream.
  int64_t num_starts() const { return static_cast<int64_t>(starts_.size()); }
  /// How many documents the stream holds: the one it starts with and one per later start.
  int64_t num_documents() const { return num_starts() + 1; }

 private:
  std::vector<int64_t> starts_;  // positions right after a separator, in (0, n), increasing
};

}  // namespace lat
