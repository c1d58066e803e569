// Encoding a whole corpus with a subword model on several threads: the text is cut where the
// model's pre-tokenization guarantees that no token crosses the cut, the pieces are encoded
// at once, and their ids are concatenated, so the result equals one encode() of the text.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace lat {

/// Offsets where `text` may be cut into about `pieces` parts: each cut is just after a '\n'
/// that a character other than whitespace (' ', '\t', '\n', '\r', '\v', '\f') follows.
/// Returns the boundaries in order, starting at 0 and ending at text.size() (so fewer than
/// pieces + 1 when the text has fewer such places). pieces < 1 counts as 1.
std::vector<size_t> newline_cuts(std::string_view text, int64_t pieces);

/// tokenizer.encode(text), on get_num_threads() threads (OpenMP) when the tokenizer is a
/// subword model whose splits_after_newline() holds; on one thread otherwise. Throws what
/// encode throws (the byte offset of invalid UTF-8 is then the piece's, so the whole text is
/// encoded again on one thread to name the offset in the text).
std::vector<int64_t> parallel_encode(const Tokenizer& tokenizer, std::string_view text);

}  // namespace lat
