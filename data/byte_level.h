// GPT-2's byte-level alphabet (Radford et al. 2019, the `bytes_to_unicode` of openai/gpt-2's
// encoder.py, which Hugging Face tokenizers' ByteLevel pre-tokenizer and decoder use): each of
// the 256 bytes stands for one printable code point, so that a byte-level BPE vocabulary is a
// set of ordinary strings. Printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF)
// stand for themselves; the other 68 bytes, in increasing order, for U+0100, U+0101, ...
// (space 0x20 -> 'Ġ' U+0120, '\n' 0x0A -> 'Ċ' U+010A).
#pragma once
#include <string>
#include <string_view>

namespace lat {

/// The code point that stands for `byte`.
char32_t byte_level_char(unsigned char byte);

/// The byte `cp` stands for, or -1 when `cp` is not one of the 256 byte-level characters.
int byte_level_byte(char32_t cp);

/// `bytes` (any bytes) written in the byte-level alphabet, as UTF-8.
std::string to_byte_level(std::string_view bytes);

/// The bytes a token's text stands for when every character of `token` (UTF-8) is a
/// byte-level character; otherwise `token` itself (an added token such as "<|endoftext|>"
/// whose characters are not all byte-level characters), as Hugging Face's ByteLevel decoder does.
std::string from_byte_level(std::string_view token);

/// `bytes` as valid UTF-8: each maximal ill-formed subsequence replaced by U+FFFD (Unicode's
/// "substitution of maximal subparts", what Rust's String::from_utf8_lossy does).
std::string utf8_lossy(std::string_view bytes);

}  // namespace lat
