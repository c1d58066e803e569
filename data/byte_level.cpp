// GPT-2's byte-level alphabet and lossy UTF-8 (byte_level.h).
#include "data/byte_level.h"

#include <array>

#include "data/utf8.h"

namespace lat {
namespace {

struct ByteLevelTables {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int, 0x144> byte_of_char{};  // the largest byte-level character is U+0143

  ByteLevelTables() {
    byte_of_char.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
      char_of_byte[b] = cp;
      byte_of_char[cp] = b;
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

// The length of the UTF-8 sequence led by `lead` and the range its second byte must lie in
// (RFC 3629's table: it excludes overlong forms, surrogates and values above U+10FFFF);
// 0 for a byte that cannot lead.
struct LeadByte {
  int length;
  unsigned char second_min, second_max;
};

LeadByte lead_byte(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

char32_t byte_level_char(unsigned char byte) { return tables().char_of_byte[byte]; }

int byte_level_byte(char32_t cp) { return cp < tables().byte_of_char.size() ? tables().byte_of_char[cp] : -1; }

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_level_char(static_cast<unsigned char>(c)));
  return out;
}

std::string from_byte_level(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    const LeadByte lead = lead_byte(static_cast<unsigned char>(token[pos]));
    char32_t cp = 0;
    if (lead.length == 1) {
      cp = static_cast<unsigned char>(token[pos++]);
    } else if (lead.length == 2 && pos + 1 < token.size()) {
      cp = ((static_cast<unsigned char>(token[pos]) & 0x1F) << 6) | (static_cast<unsigned char>(token[pos + 1]) & 0x3F);
      pos += 2;
    } else {
      return std::string(token);  // byte-level characters are at most U+0143: two bytes
    }
    const int b = byte_level_byte(cp);
    if (b < 0) return std::string(token);
    bytes += static_cast<char>(b);
  }
  return bytes;
}

std::string utf8_lossy(std::string_view bytes) {
  static const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const LeadByte lead = lead_byte(static_cast<unsigned char>(bytes[pos]));
    if (lead.length == 1) {
      out += bytes[pos++];
      continue;
    }
    if (lead.length == 0) {
      out += kReplacement;
      ++pos;
      continue;
    }
    // Take the longest prefix of a well-formed sequence; an incomplete one is one U+FFFD.
    size_t taken = 1;
    while (taken < static_cast<size_t>(lead.length) && pos + taken < bytes.size()) {
      const auto b = static_cast<unsigned char>(bytes[pos + taken]);
      const bool ok = taken == 1 ? b >= lead.second_min && b <= lead.second_max : (b & 0xC0) == 0x80;
      if (!ok) break;
      ++taken;
    }
    if (taken == static_cast<size_t>(lead.length))
      out.append(bytes.substr(pos, taken));
    else
      out += kReplacement;
    pos += taken;
  }
  return out;
}

}  // namespace lat
