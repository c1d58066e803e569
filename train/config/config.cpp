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

std::vector<std::string> model_keys_differing(const Config& init, const Config& now) {
  Config a = init, b = now;
  std::vector<std::string> differences;
  for (const KeySpec& spec : schema()) {
    const std::string key = spec.key;
    if (key.rfind("model.", 0) != 0) continue;
    FieldPtr fb = spec.field(b);
    std::visit(
        [&](auto* va) {
          auto* vb = std::get<decltype(va)>(fb);
          if (*va == *vb) return;
          using T = std::remove_pointer_t<decltype(va)>;
          if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
            differences.push_back(key + ": " + format_significant(static_cast<double>(*va)) + " (init_from) vs " +
                                  format_significant(static_cast<double>(*vb)) + " (this run)");
          } else if constexpr (std::is_same_v<T, bool>) {
            differences.push_back(key + ": " + (*va ? "true" : "false") + " (init_from) vs " +
                                  (*vb ? "true" : "false") + " (this run)");
          } else if constexpr (std::is_same_v<T, std::string>) {
            differences.push_back(key + ": '" + *va + "' (init_from) vs '" + *vb + "' (this run)");
          } else {
            differences.push_back(key);
          }
        },
        spec.field(a));
  }
  return differences;
}

}  // namespace lat
