// Loading a config: YAML text -> Loader (defaults, document, overrides) -> validate, all
// driven by the schema table (schema.h); and the queries on a resolved config (config.h).
#include "train/config/config.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <type_traits>
#include <variant>

#include <yaml-cpp/yaml.h>

#include "data/regular_file.h"
#include "train/config/loader.h"
#include "train/config/schema.h"
#include "train/config/validate.h"
#include "train/config/yaml_document.h"
#include "train/text/format.h"

namespace lat {
namespace {

/// The config of `root` (null: none) plus `overrides`, validated; `source` names the file or
/// string in errors and the default out_dir.
Config build(const YAML::Node* root, const std::string& source, const std::vector<std::string>& overrides,
             bool check_paths) {
  Loader loader(source);
  if (root) loader.apply_document(*root, source);
  for (const std::string& assignment : overrides) loader.apply_override(assignment);
  Validation validation(loader.config(), loader.origins(), std::filesystem::path(source).stem().string(),
                        check_paths);
  validate(validation);
  return loader.config();
}

/// The YAML document of `text`; a syntax error or a second document names `source` and the line.
YAML::Node parse_text(const std::string& text, const std::string& source) {
  std::optional<int> second_line;
  YAML::Node root;
  try {
    root = YAML::Load(text);
    second_line = second_document_line(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError("config: YAML syntax error: " + e.msg + " (" + source + ":" + std::to_string(e.mark.line + 1) +
                      ")");
  } catch (const YAML::Exception& e) {
    throw ConfigError("config: cannot parse: " + e.msg + " (" + source + ")");
  }
  if (second_line)
    throw ConfigError(
        "config: a second YAML document (or text after the first that YAML cannot read), expected one per file: "
        "remove it or merge it into the first (" +
        source + ":" + std::to_string(*second_line) + ")");
  return root;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  // Checked before opening: a FIFO would block, a directory reads as nothing.
  if (const std::optional<std::string> kind = non_regular_file_kind(path))
    throw ConfigError("config: '" + path + "' " + *kind + ", expected a YAML file");
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

namespace {

/// Calls on_difference(key, field of a, field of b) for each schema key whose values differ
/// between a and b, in schema order.
template <class OnDifference>
void for_each_differing_key(const Config& a, const Config& b, const OnDifference& on_difference) {
  Config ca = a, cb = b;  // the schema's field accessors take a mutable Config
  for (const KeySpec& spec : schema()) {
    const FieldPtr fa = spec.field(ca), fb = spec.field(cb);
    const bool same = std::visit([&](auto* va) { return *va == *std::get<decltype(va)>(fb); }, fa);
    if (!same) on_difference(std::string(spec.key), fa, fb);
  }
}

/// A model.* key's value as the messages show it (the model's keys are scalars).
std::string scalar_text(const FieldPtr& field) {
  return std::visit(
      [](auto* value) -> std::string {
        using T = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>)
          return format_significant(static_cast<double>(*value));
        else if constexpr (std::is_same_v<T, bool>)
          return *value ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return "'" + *value + "'";
        else
          return "(a list)";
      },
      field);
}

}  // namespace

std::vector<std::string> resume_incompatible_keys(const Config& saved, const Config& now) {
  std::vector<std::string> keys;
  for_each_differing_key(saved, now, [&](const std::string& key, const FieldPtr&, const FieldPtr&) {
    const bool may_change = key.rfind("train.", 0) == 0 && key != "train.batch_size" && key != "train.grad_accum" &&
                            key != "train.seed";
    if (!may_change) keys.push_back(key);
  });
  return keys;
}

std::vector<std::string> model_keys_differing(const Config& init, const Config& now) {
  std::vector<std::string> differences;
  for_each_differing_key(init, now, [&](const std::string& key, const FieldPtr& a, const FieldPtr& b) {
    if (key.rfind("model.", 0) == 0)
      differences.push_back(key + ": " + scalar_text(a) + " (init_from) vs " + scalar_text(b) + " (this run)");
  });
  return differences;
}

}  // namespace lat
