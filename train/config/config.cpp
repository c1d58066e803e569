// Loading a config: YAML text -> Loader (defaults, document, overrides) -> validate, all
// driven by the schema table (schema.h); and the queries on a resolved config (config.h).
#include "train/config/config.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <variant>

#include <yaml-cpp/yaml.h>

#include "train/config/loader.h"
#include "train/config/schema.h"
#include "train/config/validate.h"

namespace lat {
namespace {

/// The config of `root` (null: none) plus `overrides`, validated; `source` names the file or
/// string in errors and the default out_dir.
Config build(const YAML::Node* root, const std::string& source, const std::vector<std::string>& overrides,
             bool check_paths) {
  Loader loader(source);
  if (root) loader.apply_document(*root, source);
  for (const std::string& assignment : overrides) loader.apply_override(assignment);
  Validation validation(loader, std::filesystem::path(source).stem().string(), check_paths);
  validate(validation);
  return loader.config();
}

/// The YAML document of `text`; a syntax error names `source` and the line.
YAML::Node parse_text(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError("config: YAML syntax error: " + e.msg + " (" + source + ":" + std::to_string(e.mark.line + 1) +
                      ")");
  } catch (const YAML::Exception& e) {
    throw ConfigError("config: cannot parse: " + e.msg + " (" + source + ")");
  }
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (std::filesystem::is_directory(path))
    throw ConfigError("config: '" + path + "' is a directory, expected a YAML file");
  std::ifstream in(path);
  if (!in)
    throw ConfigError("config: cannot read '" + path + "': " +
                      (std::filesystem::exists(path) ? "not readable" : "no such file"));
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node root = parse_text(text.str(), path);
  return build(&root, path, overrides, true);
}

Config parse_config(const std::string& yaml, const std::string& source, const std::vector<std::string>& overrides) {
  YAML::Node root = parse_text(yaml, source);
  return build(&root, source, overrides, false);
}

std::vector<std::string> resume_incompatible_keys(const Config& saved, const Config& now) {
  Config a = saved, b = now;
  std::vector<std::string> keys;
  for (const KeySpec& spec : schema()) {
    const std::string key = spec.key;
    const bool may_change = key.rfind("train.", 0) == 0 && key != "train.batch_size" && key != "train.grad_accum" &&
                            key != "train.seed";
    if (may_change) continue;
    FieldPtr fb = spec.field(b);
    const bool same = std::visit([&](auto* va) { return *va == *std::get<decltype(va)>(fb); }, spec.field(a));
    if (!same) keys.push_back(key);
  }
  return keys;
}

std::vector<std::string> mixer_pattern(const std::string& layers) {
  std::vector<std::string> names;
  std::stringstream ss(layers);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    names.push_back(first == std::string::npos ? "" : item.substr(first, item.find_last_not_of(" \t") + 1 - first));
  }
  return names;
}

std::vector<std::string> layer_mixers(const ModelConfig& model) {
  const std::vector<std::string> pattern = mixer_pattern(model.layers);
  LAT_CHECK(!pattern.empty(), "layer_mixers: model.layers: expected mixer names, got '" << model.layers << "'");
  std::vector<std::string> mixers;
  for (int64_t i = 0; i < model.n_layers; ++i) mixers.push_back(pattern[i % pattern.size()]);
  return mixers;
}

int64_t value_head_dim(const ModelConfig& model) {
  return static_cast<int64_t>(static_cast<double>(model.head_dim) * model.expand_v);
}

}  // namespace lat
