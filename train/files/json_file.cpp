// JSON of lat's model files (json_file.h).
#include "train/files/json_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <vector>

#include "data/regular_file.h"
#include "lat/error.h"

namespace lat {
namespace {

// nlohmann's parse errors explain in up to ~150 characters, then quote the token read.
constexpr size_t kParseErrorChars = 200;

/// Appends the compact dump of `value` to `out`, stopping once `out` holds more than `limit`
/// characters. The recursion is as deep as the value, which parse_json_text bounds.
void append_dump(const nlohmann::json& value, std::string& out, size_t limit) {
  if (out.size() > limit) return;
  if (value.is_string()) {
    out += nlohmann::json(value.get_ref<const std::string&>().substr(0, limit + 1)).dump();
  } else if (value.is_array()) {
    out += '[';
    for (size_t i = 0; i < value.size() && out.size() <= limit; ++i) {
      if (i > 0) out += ',';
      append_dump(value[i], out, limit);
    }
    out += ']';
  } else if (value.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() <= limit; ++it) {
      if (!first) out += ',';
      first = false;
      out += nlohmann::json(it.key().substr(0, limit + 1)).dump() + ':';
      append_dump(it.value(), out, limit);
    }
    out += '}';
  } else {
    out += value.dump();
  }
}

}  // namespace

std::string excerpt(const std::string& text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  size_t end = max_chars;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // not inside a UTF-8 character
  return text.substr(0, end) + "...";
}

std::string json_excerpt(const nlohmann::json& value) {
  std::string out;
  append_dump(value, out, kExcerptChars);
  return excerpt(out);
}

nlohmann::json parse_json_text(const std::string& text, const std::string& subject) {
  // nlohmann's lexer reads a NUL byte as the end of the input (C strings), so a value followed
  // by a NUL and anything else would parse; JSON text never holds one (in strings it is \u0000).
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw Error(subject + " is not valid JSON: a NUL byte at byte " + std::to_string(nul) +
                " (expected JSON text only, nothing after the value but whitespace)");
  // The keys seen in each open container (arrays get an unused set, so the stack follows
  // the nesting one entry per level).
  std::vector<std::set<std::string>> keys;
  const nlohmann::json::parser_callback_t check = [&](int depth, nlohmann::json::parse_event_t event,
                                                      nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        // Refused before the container is entered, so the value built never gets deeper.
        if (depth >= kMaxJsonDepth)
          throw Error(subject + " nests arrays or objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        keys.emplace_back();
        break;
      case Event::object_end:
      case Event::array_end: keys.pop_back(); break;
      case Event::key:
        if (!keys.back().insert(parsed.get<std::string>()).second)
          throw Error(subject + " has the key '" + excerpt(parsed.get<std::string>()) + "' twice in one object");
        break;
      case Event::value: break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, check);
  } catch (const nlohmann::json::exception& e) {
    // Room for nlohmann's explanation; the token it quotes can be a whole huge string or number.
    // Without nlohmann's "[json.exception.<kind>.<id>] " tag: the user needs the reason only.
    std::string reason = e.what();
    if (reason.rfind("[json.exception.", 0) == 0 && reason.find("] ") != std::string::npos)
      reason.erase(0, reason.find("] ") + 2);
    throw Error(subject + " is not valid JSON: " + excerpt(reason, kParseErrorChars));
  }
}

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  return parse_json_text(text, "load_model_weights: '" + source + "'");
}

std::string read_json_file_text(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  const std::string subject = "load_model_weights: '" + path + "'";
  if (const std::optional<std::string> kind = non_regular_file_kind(path))
    throw Error(subject + ": " + *kind + ", expected a regular file (" + what + ")");
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) throw Error("load_model_weights: cannot open " + what + " '" + path + "': " + ec.message());
  if (size > kMaxJsonFileBytes)
    throw Error(subject + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(kMaxJsonFileBytes) +
                " a JSON file of a model may have (" + what + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("load_model_weights: cannot open " + what + " '" + path + "': " + std::strerror(errno));
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (in.gcount() != static_cast<std::streamsize>(size))
    throw Error(subject + ": reading " + std::to_string(size) + " bytes failed (" + what + ")");
  return text;
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  return parse_json_text(read_json_file_text(path, what), "load_model_weights: '" + path + "'");
}

}  // namespace lat
