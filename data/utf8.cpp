// Strict UTF-8 decoding and encoding (utf8.h).
#include "data/utf8.h"

#include <cstdio>

#include "lat/error.h"

namespace lat {

char32_t next_code_point(std::string_view text, size_t& pos, const char* fn) {
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

std::string describe_char(char32_t cp) {
  char code[16];
  std::snprintf(code, sizeof(code), "U+%04X", static_cast<unsigned>(cp));
  if (cp < 0x20 || cp == 0x7F) return code;
  std::string s = "'";
  append_utf8(s, cp);
  return s + "' (" + code + ")";
}

void check_utf8(std::string_view text, const char* fn) {
  for (size_t pos = 0; pos < text.size();) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    next_code_point(text, pos, fn);
  }
}

}  // namespace lat
