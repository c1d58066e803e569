// Building a Config from its defaults, a YAML document and `--set key=value` overrides,
// remembering where each key was set ("file:line" or "--set key") for the errors of the
// validator. Internal to train/config/.
#pragma once
#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

#include "train/config/config_types.h"
#include "train/config/key_origins.h"
#include "train/config/schema.h"

namespace lat {

/// A Config being built from defaults, files and overrides.
class Loader {
 public:
  /// `source` (the file or string name) is named for keys that were never set.
  explicit Loader(std::string source) : origins_(std::move(source)) {}

  /// Applies a parsed document (the whole file) read from `file`. Throws ConfigError for a
  /// top level that is not a map, a key that is not a name, an unknown or duplicate key
  /// (also one given both nested and dotted), or a value of the wrong type.
  void apply_document(const YAML::Node& root, const std::string& file);

  /// Applies one "key=value" override (the value parsed as YAML; a section takes a map).
  /// Throws ConfigError naming "--set key" as apply_document does.
  void apply_override(const std::string& assignment);

  /// The config built so far (defaults where nothing was set).
  Config& config() { return config_; }

  /// Where each key was set so far.
  const KeyOrigins& origins() const { return origins_; }

 private:
  /// How the keys of one map are named in errors and checked for repeats: in a file (`file`
  /// not empty) by their own lines, with `leaves_seen` catching a key set twice; in an
  /// override every key reports `override_location`.
  struct Origin {
    std::string file;
    std::map<std::string, std::string>* leaves_seen = nullptr;  // leaf key -> location of its first setting
    std::string override_location;
  };

  /// Applies every entry of the map `map` under `prefix`.
  void walk(const YAML::Node& map, const std::string& prefix, const Origin& origin);
  /// Applies `value` to the dotted `key`: a schema key, or a section holding a map.
  void apply_key(const std::string& key, const YAML::Node& value, const std::string& location, const Origin& origin);
  /// Sets the schema key `spec`, recording where.
  void set(const KeySpec& spec, const YAML::Node& value, const std::string& location, const std::string& file);

  Config config_;
  KeyOrigins origins_;
};

}  // namespace lat
