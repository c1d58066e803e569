// Defaults, a document and overrides into a Config (loader.h).
#include "train/config/loader.h"

#include <optional>
#include <utility>
#include <vector>

#include "train/config/suggest.h"
#include "train/config/yaml_document.h"
#include "train/config/yaml_value.h"

namespace lat {
namespace {

/// For a key under a mixer's name (`model.kda`, `model.kda.chunk_size`) whose sizes live in a
/// shared section: the note naming that section, and the key rewritten into it ("" for the
/// mixer's name alone). {"", ""} for any other key.
std::pair<std::string, std::string> mixer_section_hint(const std::string& key) {
  // mla and attn have sections of their own, so `model.kda:` is a natural guess.
  static const std::vector<std::pair<std::string, std::string>> kSizesOf = {
      {"kda", "model.linear"},         {"gdn", "model.linear"},        {"delta_net", "model.linear"},
      {"linear_attn", "model.linear"}, {"simple_gla", "model.linear"}, {"retention", "model.linear"},
      {"mamba2", "model.mamba"}};
  for (const auto& [mixer, section] : kSizesOf) {
    const std::string prefix = "model." + mixer;
    if (key != prefix && key.rfind(prefix + ".", 0) != 0) continue;
    return {": " + mixer + " layers take their sizes from " + section + ".* (there is no " + prefix + " section)",
            key == prefix ? "" : section + key.substr(prefix.size())};
  }
  return {"", ""};
}

}  // namespace

void Loader::apply_document(const YAML::Node& root, const std::string& file) {
  if (root.IsNull()) return;
  if (!root.IsMap())
    throw ConfigError("config: expected a map of keys at the top level, got " + describe(root) + " (" +
                      node_location(file, root) + ")");
  std::map<std::string, std::string> leaves_seen;
  walk(root, "", Origin{file, &leaves_seen, ""});
}

void Loader::apply_override(const std::string& assignment) {
  auto eq = assignment.find('=');
  std::string key = assignment.substr(0, eq);
  if (eq == std::string::npos || key.empty()) throw ConfigError("--set '" + assignment + "': expected key=value");
  const std::string location = "--set " + key;
  const std::string text = assignment.substr(eq + 1);
  YAML::Node value;
  std::optional<int> second_line;
  try {
    value = YAML::Load(text);
    second_line = second_document_line(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(key + ": cannot parse the value as YAML: " + e.msg + " (" + location + ")");
  }
  if (second_line)
    throw ConfigError(key +
                      ": the value holds a second YAML document (or text after the first that YAML cannot "
                      "read), expected one value (" +
                      location + ")");
  if (is_section(key) && !value.IsMap())
    throw ConfigError(key + ": expected a map of keys, got " + describe(value) + " (" + location + ")");
  apply_key(key, value, location, Origin{"", nullptr, location});
}

void Loader::walk(const YAML::Node& map, const std::string& prefix, const Origin& origin) {
  std::map<std::string, int> keys_here;  // literal keys of this map -> line, for duplicates
  for (const auto& entry : map) {
    const YAML::Node& key_node = entry.first;
    const std::string location = origin.file.empty() ? origin.override_location : node_location(origin.file, key_node);
    if (!key_node.IsScalar())
      throw ConfigError((prefix.empty() ? "config" : prefix) + ": expected a key name, got " + describe(key_node) +
                        " (" + location + ")");
    const std::string name = key_node.Scalar();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    const int line = key_node.Mark().line + 1;
    if (auto [seen, inserted] = keys_here.emplace(name, line); !inserted)
      throw ConfigError(key + ": duplicate key, first set at line " + std::to_string(seen->second) + " (" + location +
                        ")");
    const YAML::Node& value = entry.second;
    if (is_section(key) && value.IsNull()) continue;  // an empty section, e.g. "train:" with nothing below
    apply_key(key, value, location, origin);
  }
}

void Loader::apply_key(const std::string& key, const YAML::Node& value, const std::string& location,
                       const Origin& origin) {
  if (const KeySpec* spec = find_key(key)) {
    if (origin.leaves_seen) {
      if (auto [seen, inserted] = origin.leaves_seen->emplace(key, location); !inserted)
        throw ConfigError(key + ": duplicate key, first set at " + seen->second + " (" + location + ")");
    }
    set(*spec, value, location, origin.file);
  } else if (is_section(key)) {
    if (!value.IsMap())
      throw ConfigError(key + ": expected a map of keys, got " + describe(value) + " (" + location + ")");
    walk(value, key, origin);
  } else {
    const auto [note, key_in_section] = mixer_section_hint(key);
    const std::string suggestion = note.empty()
                                       ? did_you_mean(key, all_key_names())
                                       : (key_in_section.empty() ? "" : did_you_mean(key_in_section, all_key_names()));
    throw ConfigError(key + ": unknown key" + note + suggestion + " (" + location + ")");
  }
}

void Loader::set(const KeySpec& spec, const YAML::Node& value, const std::string& location, const std::string& file) {
  origins_.set(spec.key, location);
  read_value(spec, value, ValueSource{location, file}, config_);
}

}  // namespace lat
