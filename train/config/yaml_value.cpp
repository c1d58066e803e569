// YAML scalars, lists and maps into Config fields (yaml_value.h).
#include "train/config/yaml_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "data/documents.h"

namespace lat {
namespace {

/// Whether `value` is a scalar written as a string: quoted ('32', "32") or tagged !!str. An
/// untagged plain scalar has the tag "?", and `!!int "48"` names its type explicitly.
bool is_string_scalar(const YAML::Node& value) {
  return value.IsScalar() && (value.Tag() == "!" || value.Tag() == "tag:yaml.org,2002:str");
}

bool parse_double_text(std::string text, double& out) {
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty() && std::isfinite(out);
}

bool parse_int_text(std::string text, int64_t& out) {
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  if (ec == std::errc() && ptr == end && !text.empty()) return true;
  // Accept an integral float such as 1e4 (max_steps: 1e4).
  double value = 0;
  if (!parse_double_text(text, value) || value != std::floor(value) || std::fabs(value) > 9.0e15) return false;
  out = static_cast<int64_t>(value);
  return true;
}

/// true, True, TRUE, false, False or FALSE (YAML 1.2's booleans) into `out`.
bool parse_bool_text(const std::string& text, bool& out) {
  static const std::vector<std::string> yes = {"true", "True", "TRUE"}, no = {"false", "False", "FALSE"};
  const bool is_yes = std::find(yes.begin(), yes.end(), text) != yes.end();
  if (!is_yes && std::find(no.begin(), no.end(), text) == no.end()) return false;
  out = is_yes;
  return true;
}

/// Reads the value of one key; `key` and `source` name it in errors.
class ValueReader {
 public:
  ValueReader(const std::string& key, const ValueSource& source) : key_(key), source_(source) {}

  void read(const YAML::Node& value, int64_t& out) const { out = to_int("an int", value, source_.location); }

  void read(const YAML::Node& value, double& out) const { out = to_float(value, source_.location); }

  void read(const YAML::Node& value, bool& out) const {
    refuse_string(value, "true or false", source_.location, [](const std::string& text) {
      bool unused = false;
      return parse_bool_text(text, unused);
    });
    if (!value.IsScalar() || !parse_bool_text(value.Scalar(), out))
      type_error("true or false", value, source_.location);
  }

  /// A nullable key reads YAML null as "" (not set).
  void read(const YAML::Node& value, std::string& out, bool nullable) const {
    if (nullable && value.IsNull())
      out = "";
    else if (value.IsScalar())
      out = value.Scalar();
    else
      type_error("a string", value, source_.location);
  }

  /// Two floats; YAML's .inf (or inf) is positive infinity here, an open upper end
  /// (model.mamba.time_step_limit), which each key's bounds then accept or refuse.
  void read(const YAML::Node& value, std::array<double, 2>& out) const {
    if (!value.IsSequence() || value.size() != 2) type_error("a list of 2 floats", value, source_.location);
    static const std::vector<std::string> infinity = {".inf", ".Inf", ".INF", "inf", "+.inf", "+inf"};
    for (size_t i = 0; i < 2; ++i) {
      const YAML::Node& item = value[i];
      const bool is_infinity = item.IsScalar() && !is_string_scalar(item) &&
                               std::find(infinity.begin(), infinity.end(), item.Scalar()) != infinity.end();
      out[i] = is_infinity ? std::numeric_limits<double>::infinity() : to_float(item, item_location(item));
    }
  }

  void read(const YAML::Node& value, std::vector<std::string>& out) const {
    out.clear();
    if (value.IsNull()) return;
    if (!value.IsSequence()) type_error("a list of strings", value, source_.location);
    for (const YAML::Node& item : value) {
      if (!item.IsScalar()) type_error("a list of strings", item, item_location(item));
      out.push_back(item.Scalar());
    }
  }

  /// An int, or a non-empty list of ints.
  void read(const YAML::Node& value, std::vector<int64_t>& out) const {
    static const std::string expected = "an int or a non-empty list of ints";
    out.clear();
    if (!value.IsSequence()) {
      out.push_back(to_int(expected, value, source_.location));
      return;
    }
    if (value.size() == 0) type_error(expected, value, source_.location);
    for (const YAML::Node& item : value) out.push_back(to_int(expected, item, item_location(item)));
  }

  /// Whether `text` is an integer written as one (digits and a sign: not 65.0 or 1e3), into `id`.
  static bool is_integer_text(const std::string& text, int64_t& id) {
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), id);
    return error == std::errc() && end == text.data() + text.size();
  }

  /// Whether an unquoted scalar is a YAML bool or float (true, no, 1.5, 65.0, .inf).
  static bool reads_as_bool_or_float(const YAML::Node& value) {
    bool flag = false;
    double number = 0.0;
    return YAML::convert<bool>::decode(value, flag) || YAML::convert<double>::decode(value, number);
  }

  /// null: not set; an unquoted int: a token id; an unquoted bool or float: an error; any other
  /// scalar (a quoted "50256" or "true" too): a string.
  void read(const YAML::Node& value, DocSeparator& out) const {
    int64_t id = 0;
    if (value.IsNull())
      out = std::monostate{};
    else if (!value.IsScalar())
      type_error("a string or a token id", value, source_.location);
    else if (!is_string_scalar(value) && is_integer_text(value.Scalar(), id))
      out = id;
    else if (!is_string_scalar(value) && reads_as_bool_or_float(value))
      // `true` or `1.5` unquoted is most likely a mistake, not the text "true" or "1.5".
      type_error("a quoted string or an int token id", value, source_.location);
    else
      out = value.Scalar();
  }

  void read(const YAML::Node& value, FloatMap& out) const {
    out.clear();
    if (value.IsNull()) return;
    if (!value.IsMap()) type_error("a map of pattern: float", value, source_.location);
    for (const auto& entry : value) {
      const std::string here = item_location(entry.first);
      if (!entry.first.IsScalar()) type_error("a pattern", entry.first, here);
      const std::string pattern = entry.first.Scalar();
      for (const auto& [seen, mult] : out)
        if (seen == pattern) throw ConfigError(key_ + ": duplicate pattern '" + pattern + "' (" + here + ")");
      out.emplace_back(pattern, to_float(entry.second, here));
    }
  }

 private:
  [[noreturn]] void type_error(const std::string& expected, const YAML::Node& value,
                               const std::string& location) const {
    throw ConfigError(key_ + ": expected " + expected + ", got " + describe(value) + " (" + location + ")");
  }

  /// A quoted scalar is a string in YAML, not a number or a bool: refused for those keys
  /// whatever its text (so `"32"` and `"yes"` fail alike), with a hint when `parses` takes the
  /// text unquoted.
  template <class Parses>
  void refuse_string(const YAML::Node& value, const std::string& expected, const std::string& location,
                     const Parses& parses) const {
    if (!is_string_scalar(value)) return;
    throw ConfigError(key_ + ": expected " + expected + ", got the string " + double_quoted(value.Scalar()) +
                      (parses(value.Scalar()) ? " (remove the quotes)" : "") + " (" + location + ")");
  }

  int64_t to_int(const std::string& expected, const YAML::Node& value, const std::string& location) const {
    int64_t out = 0;
    refuse_string(value, expected, location, [&](const std::string& text) { return parse_int_text(text, out); });
    if (!value.IsScalar() || !parse_int_text(value.Scalar(), out)) type_error(expected, value, location);
    return out;
  }

  double to_float(const YAML::Node& value, const std::string& location) const {
    double out = 0;
    refuse_string(value, "a float", location, [&](const std::string& text) { return parse_double_text(text, out); });
    if (!value.IsScalar() || !parse_double_text(value.Scalar(), out)) type_error("a float", value, location);
    return out;
  }

  /// Items of lists and maps in a file are named at their own line; in an override, by the key.
  std::string item_location(const YAML::Node& item) const {
    return source_.file.empty() ? source_.location : node_location(source_.file, item);
  }

  const std::string& key_;
  const ValueSource& source_;
};

}  // namespace

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence: return node.size() == 0 ? "an empty list" : "a list";
    case YAML::NodeType::Map: return node.size() == 0 ? "an empty map" : "a map";
    default: return "nothing (null)";
  }
}

std::string node_location(const std::string& file, const YAML::Node& node) {
  return file + ":" + std::to_string(node.Mark().line + 1);
}

void read_value(const KeySpec& spec, const YAML::Node& value, const ValueSource& source, Config& config) {
  const std::string key = spec.key;
  const ValueReader reader(key, source);
  std::visit(
      [&](auto* field) {
        if constexpr (std::is_same_v<std::remove_pointer_t<decltype(field)>, std::string>)
          reader.read(value, *field, spec.nullable);
        else
          reader.read(value, *field);
      },
      spec.field(config));
}

}  // namespace lat
