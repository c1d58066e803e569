// to_yaml: the resolved config as YAML, keys nested by section in schema order (config.h).
#include <charconv>
#include <cmath>
#include <sstream>
#include <type_traits>

#include <yaml-cpp/yaml.h>

#include "train/config/config.h"
#include "train/config/schema.h"

namespace lat {
namespace {

/// Shortest text that parses back to the same double, with a ".0" on whole numbers so that
/// other YAML readers see a float too.
std::string float_text(double value) {
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";  // YAML's spelling, read back by yaml_value
  char buffer[64];
  auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

void emit_value(YAML::Emitter& out, const FieldPtr& field, bool nullable) {
  std::visit(
      [&](auto* value) {
        using T = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out << *value;
        } else if constexpr (std::is_same_v<T, double>) {
          out << float_text(*value);
        } else if constexpr (std::is_same_v<T, bool>) {
          out << (*value ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (nullable && value->empty()) out << YAML::Null;
          else out << YAML::DoubleQuoted << *value;
        } else if constexpr (std::is_same_v<T, std::array<double, 2>>) {
          out << YAML::Flow << YAML::BeginSeq << float_text((*value)[0]) << float_text((*value)[1]) << YAML::EndSeq;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          out << YAML::Flow << YAML::BeginSeq;
          for (const std::string& item : *value) out << YAML::DoubleQuoted << item;
          out << YAML::EndSeq;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          if (value->size() == 1) {
            out << value->front();
          } else {
            out << YAML::Flow << YAML::BeginSeq;
            for (int64_t item : *value) out << item;
            out << YAML::EndSeq;
          }
        } else if constexpr (std::is_same_v<T, DocSeparator>) {
          if (const auto* text = std::get_if<std::string>(value))
            out << YAML::DoubleQuoted << *text;
          else if (const auto* id = std::get_if<int64_t>(value))
            out << *id;
          else
            out << YAML::Null;
        } else {
          static_assert(std::is_same_v<T, FloatMap>);
          out << YAML::Flow << YAML::BeginMap;
          for (const auto& [pattern, mult] : *value)
            out << YAML::Key << YAML::DoubleQuoted << pattern << YAML::Value << float_text(mult);
          out << YAML::EndMap;
        }
      },
      field);
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

}  // namespace

std::string to_yaml(const Config& config) {
  Config copy = config;  // the schema hands out mutable field pointers
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // the section components currently open
  for (const KeySpec& spec : schema()) {
    std::vector<std::string> parts = split_key(spec.key);
    const std::string leaf = parts.back();
    parts.pop_back();
    size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) ++common;
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (size_t i = common; i < parts.size(); ++i) {
      out << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
      open.push_back(parts[i]);
    }
    out << YAML::Key << leaf << YAML::Value;
    emit_value(out, spec.field(copy), spec.nullable);
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace lat
