// The one JSON reader of lat's model files (the safetensors header and __metadata__ values,
// config.json, tokenizer.json): a nesting depth limit enforced while parsing, so a deeply
// nested file is an error instead of a stack overflow in whatever walks the value later;
// duplicate keys refused instead of silently keeping the last; regular files of bounded size
// only; and error messages that quote at most a short excerpt of any value.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace lat {

/// Deepest nesting of arrays and objects accepted: lat's files need 3 levels; 64 leaves room
/// for other tools' metadata while keeping every recursive walk of a value shallow.
constexpr int kMaxJsonDepth = 64;

/// Largest config.json or tokenizer.json read (bytes): a char vocabulary of every Unicode
/// code point is about 10 MB.
constexpr uint64_t kMaxJsonFileBytes = 64ull << 20;

/// Characters of a value quoted in an error message before it is cut with "...".
constexpr size_t kExcerptChars = 80;

/// `text` for an error message: at most its first `max_chars` bytes (never half a UTF-8
/// character), then "..." when it was longer.
std::string excerpt(const std::string& text, size_t max_chars = kExcerptChars);

/// A JSON value for an error message: its compact dump, cut like excerpt() (without first
/// dumping the whole value).
std::string json_excerpt(const nlohmann::json& value);

/// Parses `text`, where `subject` names it as the start of the error message (e.g.
/// "load_safetensors: 'm.safetensors': header"). Throws lat::Error "<subject> is not valid
/// JSON: ..." (also for any byte after the value but whitespace, a NUL byte included: "a NUL
/// byte at byte <offset>"), "<subject> nests arrays or objects deeper than 64 levels", or "<subject> has
/// the key 'k' twice in one object" (key cut to an excerpt).
nlohmann::json parse_json_text(const std::string& text, const std::string& subject);

/// parse_json_text with the subject "load_model_weights: '<source>'".
nlohmann::json parse_json(const std::string& text, const std::string& source);

/// The text of the JSON file `path`, unparsed, with read_json_file's checks and errors (for a
/// reader that scans the text itself before parse_json_text).
std::string read_json_file_text(const std::string& path, const std::string& what);

/// Reads and parses the JSON file `path` (parse_json). Throws lat::Error
/// "load_model_weights: cannot open <what> '<path>': <reason>" when it cannot be read, and
/// names the path when it is not a regular file (a FIFO would block) or is larger than
/// kMaxJsonFileBytes (checked before reading).
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace lat
