// Strict UTF-8 (RFC 3629): decoding one code point at a time, encoding, and naming a character
// in an error message. Shared by every tokenizer, so that all of them refuse the same bytes.
#pragma once
#include <string>
#include <string_view>

namespace lat {

/// The largest Unicode code point.
inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

/// Decodes the code point starting at text[pos] and advances pos past it. Throws lat::Error
/// prefixed with `fn` and naming the byte offset for a truncated sequence, a stray continuation
/// byte, an overlong form, a surrogate or a value above U+10FFFF.
char32_t next_code_point(std::string_view text, size_t& pos, const char* fn);

/// Appends the UTF-8 form of `cp` (at most kMaxCodePoint) to `out`.
void append_utf8(std::string& out, char32_t cp);

/// Throws as next_code_point does at the first byte of `text` that is not valid UTF-8.
void check_utf8(std::string_view text, const char* fn);

/// "'a' (U+0061)", or just "U+000A" for a control character: a character in an error message.
std::string describe_char(char32_t cp);

}  // namespace lat
