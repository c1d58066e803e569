// A tokenizer.json's normalizer and pre-tokenizer (bpe_pretokenizer.h).
#include "data/bpe_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>

#include "lat/error.h"

namespace lat {

void throw_tokenizer_json_error(const std::string& origin, const std::string& key, const std::string& what) {
  throw Error("'" + origin + "': " + key + ": " + what);
}

std::string tokenizer_json_excerpt(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() <= 80) return text;
  size_t cut = 80;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // whole characters
  return text.substr(0, cut) + "...";
}

namespace {

// The pre-tokenizer patterns of the vocabularies lat reads, as their tokenizer.json spells them.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3 (\p{N}{1,3}), Qwen2 (\p{N}) and Qwen3.5 (letters with marks): each ends a word at a
// newline run before a non-space character, the same in a whole text and in one cut there.
constexpr const char* kNewlineSafePatterns[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

// A JIT stack per thread: PCRE2 allows one matcher at a time on a stack, and encode runs on
// several threads. 1 MiB lets `\s+(?!\S)` backtrack over long runs of spaces.
struct JitStack {
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  JitStack() {
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 << 10, 1 << 20, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~JitStack() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
  }
};

pcre2_match_context* thread_match_context() {
  thread_local JitStack jit;
  return jit.context;
}

bool is_numeric(char32_t cp) {
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

// The code point at text[pos] (valid UTF-8) and its length in bytes.
char32_t code_point_at(std::string_view text, size_t pos, size_t& length) {
  utf8proc_int32_t cp = 0;
  const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()) + pos,
                                              static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
  length = n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 ? static_cast<char32_t>(cp) : 0xFFFD;
}

// Unicode's White_Space characters, what Oniguruma's \s matches; PCRE2's \s also matches
// U+180E (whitespace before Unicode 6.3), where tokenizers then splits differently.
constexpr const char* kWhiteSpaceClassBody = R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// `pattern` with each \s and \S outside a character class, and each \s inside one, spelled
// as Unicode's White_Space (\S inside a class is left to PCRE2).
std::string with_oniguruma_spaces(const std::string& pattern) {
  const std::string body = kWhiteSpaceClassBody;
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's')
        out += in_class ? body : "[" + body + "]";
      else if (e == 'S' && !in_class)
        out += "[^" + body + "]";
      else
        out += {c, e};
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a literal ']' first
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
      if (end != std::string::npos) {
        out.append(pattern, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

/// A PCRE2 pattern compiled with UTF, Unicode properties and (where available) JIT.
class CompiledRegex {
 public:
  CompiledRegex(const std::string& pattern, bool literal, const std::string& origin, const std::string& key) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const std::string source = literal ? pattern : with_oniguruma_spaces(pattern);
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // UCP is not allowed with LITERAL
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &error, &offset,
                          nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      throw_tokenizer_json_error(origin, key,
                                 "a regex PCRE2 does not compile at offset " + std::to_string(offset) + ": " +
                                     reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is absent
  }
  ~CompiledRegex() { pcre2_code_free(code_); }
  CompiledRegex(const CompiledRegex&) = delete;
  CompiledRegex& operator=(const CompiledRegex&) = delete;

  /// Calls `match(start, end)` for each non-overlapping match in `subject` (valid UTF-8), left
  /// to right; an empty match moves on by one character.
  template <class F>
  void for_each_match(std::string_view subject, F&& match) const {
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_, nullptr);
    LAT_CHECK(data, "tokenizer regex: out of memory");
    size_t pos = 0;
    while (pos <= subject.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), pos,
                                 PCRE2_NO_UTF_CHECK, data, thread_match_context());
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        pcre2_match_data_free(data);
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        throw Error(std::string("tokenizer regex: matching failed: ") + reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
      const size_t start = ovector[0], end = ovector[1];
      if (end > start) {
        match(start, end);
        pos = end;
      } else {
        if (start >= subject.size()) break;
        size_t length = 1;
        code_point_at(subject, start, length);
        pos = start + length;
      }
    }
    pcre2_match_data_free(data);
  }

 private:
  pcre2_code* code_ = nullptr;
};

struct BpePretokenizer::Step {
  enum class Kind { kSplit, kDigits } kind;
  std::unique_ptr<CompiledRegex> regex;  // kSplit
  bool keep_matches = true;              // kSplit: Isolated keeps them, Removed drops them
  bool individual_digits = false;        // kDigits
};

namespace {

const nlohmann::json& member(const nlohmann::json& object, const char* key) {
  static const nlohmann::json null_value;
  const auto it = object.find(key);
  return it == object.end() ? null_value : *it;
}

bool bool_member(const nlohmann::json& object, const char* key, bool absent, const std::string& origin,
                 const std::string& path) {
  const nlohmann::json& value = member(object, key);
  if (value.is_null()) return absent;
  if (!value.is_boolean())
    throw_tokenizer_json_error(origin, path + "." + key, "expected true or false, got " + tokenizer_json_excerpt(value));
  return value.get<bool>();
}

std::string type_of(const nlohmann::json& object, const std::string& origin, const std::string& path) {
  if (!object.is_object() || !member(object, "type").is_string())
    throw_tokenizer_json_error(origin, path, "expected an object with a string 'type', got " + tokenizer_json_excerpt(object));
  return object["type"].get<std::string>();
}

}  // namespace

BpePretokenizer::BpePretokenizer(const nlohmann::json& normalizer, const nlohmann::json& pre_tokenizer,
                                 const std::string& origin) {
  // Normalizer: NFC, once or more (NFC is idempotent).
  auto read_normalizer = [&](const nlohmann::json& n, const std::string& path) {
    const std::string type = type_of(n, origin, path);
    if (type != "NFC")
      throw_tokenizer_json_error(origin, path + ".type", "lat reads null, NFC or a Sequence of NFC, got '" + type + "'");
    nfc_ = true;
  };
  if (!normalizer.is_null()) {
    if (type_of(normalizer, origin, "normalizer") == "Sequence") {
      const nlohmann::json& list = member(normalizer, "normalizers");
      if (!list.is_array()) throw_tokenizer_json_error(origin, "normalizer.normalizers", "expected an array");
      for (size_t i = 0; i < list.size(); ++i) read_normalizer(list[i], "normalizer.normalizers[" + std::to_string(i) + "]");
    } else {
      read_normalizer(normalizer, "normalizer");
    }
  }

  // Pre-tokenizer: Split and Digits steps, then ByteLevel.
  if (pre_tokenizer.is_null())
    throw_tokenizer_json_error(origin, "pre_tokenizer", "lat reads a byte-level BPE: expected a ByteLevel pre-tokenizer, got null");
  std::vector<std::pair<const nlohmann::json*, std::string>> list;
  if (type_of(pre_tokenizer, origin, "pre_tokenizer") == "Sequence") {
    const nlohmann::json& items = member(pre_tokenizer, "pretokenizers");
    if (!items.is_array()) throw_tokenizer_json_error(origin, "pre_tokenizer.pretokenizers", "expected an array");
    for (size_t i = 0; i < items.size(); ++i)
      list.emplace_back(&items[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
  } else {
    list.emplace_back(&pre_tokenizer, "pre_tokenizer");
  }
  bool byte_level = false;
  bool known_newline_pattern = false;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& p = *list[i].first;
    const std::string& path = list[i].second;
    const std::string type = type_of(p, origin, path);
    if (type == "ByteLevel") {
      if (i + 1 != list.size())
        throw_tokenizer_json_error(origin, path, "lat reads a ByteLevel pre-tokenizer only as the last step");
      byte_level = true;
      add_prefix_space_ = bool_member(p, "add_prefix_space", true, origin, path);
      if (bool_member(p, "use_regex", true, origin, path))
        byte_level_regex_ = std::make_unique<CompiledRegex>(kGpt2Pattern, false, origin, path);
    } else if (type == "Split") {
      Step step{Step::Kind::kSplit, nullptr, true, false};
      const nlohmann::json& pattern = member(p, "pattern");
      const bool is_regex = pattern.is_object() && member(pattern, "Regex").is_string();
      const bool is_string = pattern.is_object() && member(pattern, "String").is_string();
      if (!is_regex && !is_string)
        throw_tokenizer_json_error(origin, path + ".pattern",
                                   "expected {\"Regex\": ...} or {\"String\": ...}, got " + tokenizer_json_excerpt(pattern));
      const std::string text = pattern[is_regex ? "Regex" : "String"].get<std::string>();
      step.regex = std::make_unique<CompiledRegex>(text, !is_regex, origin, path + ".pattern");
      for (const char* known : kNewlineSafePatterns) known_newline_pattern |= is_regex && text == known;
      const nlohmann::json& behavior = member(p, "behavior");
      const std::string behavior_name = behavior.is_string() ? behavior.get<std::string>() : "";
      if (behavior_name != "Isolated" && behavior_name != "Removed")
        throw_tokenizer_json_error(origin, path + ".behavior", "lat reads Isolated or Removed, got " + tokenizer_json_excerpt(behavior));
      step.keep_matches = behavior_name == "Isolated";
      if (bool_member(p, "invert", false, origin, path))
        throw_tokenizer_json_error(origin, path + ".invert", "lat reads false, got true");
      steps_.push_back(std::move(step));
    } else if (type == "Digits") {
      steps_.push_back(Step{Step::Kind::kDigits, nullptr, true, bool_member(p, "individual_digits", false, origin, path)});
    } else {
      throw_tokenizer_json_error(origin, path + ".type", "lat reads ByteLevel, Split, Digits or a Sequence of them, got '" + type + "'");
    }
  }
  if (!byte_level)
    throw_tokenizer_json_error(origin, "pre_tokenizer", "lat reads a byte-level BPE: expected a ByteLevel pre-tokenizer (last in a Sequence)");
  // Only one Split, with one of the known patterns, and nothing that adds or moves characters.
  splits_after_newline_ = known_newline_pattern && steps_.size() == 1 && !add_prefix_space_;
}

BpePretokenizer::~BpePretokenizer() = default;
BpePretokenizer::BpePretokenizer(BpePretokenizer&&) noexcept = default;

bool BpePretokenizer::splits_after_newline() const { return splits_after_newline_; }

std::string BpePretokenizer::normalize(std::string_view text) const {
  if (!nfc_) return std::string(text);
  bool ascii = true;
  for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  LAT_CHECK(n >= 0, "tokenizer NFC: " << utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

void BpePretokenizer::split(std::string_view text, const std::function<void(std::string_view)>& word) const {
  std::vector<std::string_view> pieces{text}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) {
      if (step.kind == Step::Kind::kSplit) {
        size_t last = 0;
        step.regex->for_each_match(piece, [&](size_t start, size_t end) {
          if (start > last) next.push_back(piece.substr(last, start - last));
          if (step.keep_matches) next.push_back(piece.substr(start, end - start));
          last = end;
        });
        if (last < piece.size()) next.push_back(piece.substr(last));
        continue;
      }
      // Digits: runs of numeric characters (each one alone with individual_digits) between the rest.
      size_t start = 0, pos = 0;
      bool in_digits = false;
      while (pos < piece.size()) {
        size_t length = 1;
        const bool digit = is_numeric(code_point_at(piece, pos, length));
        if (pos > start && (digit != in_digits || (digit && step.individual_digits))) {
          next.push_back(piece.substr(start, pos - start));
          start = pos;
        }
        in_digits = digit;
        pos += length;
      }
      if (pos > start) next.push_back(piece.substr(start, pos - start));
    }
    pieces.swap(next);
  }
  std::string prefixed;
  for (std::string_view piece : pieces) {
    if (piece.empty()) continue;
    if (add_prefix_space_ && piece.front() != ' ') {
      prefixed.clear();
      prefixed.push_back(' ');
      prefixed.append(piece.data(), piece.size());
      piece = prefixed;
    }
    if (!byte_level_regex_) {
      word(piece);
      continue;
    }
    size_t last = 0;  // Isolated: the text between matches is a word too
    byte_level_regex_->for_each_match(piece, [&](size_t start, size_t end) {
      if (start > last) word(piece.substr(last, start - last));
      word(piece.substr(start, end - start));
      last = end;
    });
    if (last < piece.size()) word(piece.substr(last));
  }
}

}  // namespace lat
