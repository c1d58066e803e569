// One validation in progress: what the validator (validate.h) and the schema rules
// (schema.cpp) see.
// Internal to train/config/.
#pragma once
#include <string>

#include "train/config/config_types.h"
#include "train/config/key_origins.h"

namespace lat {

/// The config being checked (rules resolve derived defaults in it), where each key was set,
/// the config's name and whether paths must exist.
class Validation {
 public:
  /// `config_name` names the default out_dir; `check_paths` asks that init_from and a resume
  /// path exist.
  Validation(Config& config, const KeyOrigins& origins, std::string config_name, bool check_paths)
      : config_(config), origins_(origins), config_name_(std::move(config_name)), check_paths_(check_paths) {}

  /// The config, where keys were set, its name and whether paths are checked (see above).
  Config& config() { return config_; }
  bool was_set(const std::string& key) const { return origins_.was_set(key); }
  /// "file:line" or "--set key" where `key` was set; "not set in <source>" otherwise.
  std::string where(const std::string& key) const { return origins_.where(key); }
  const std::string& config_name() const { return config_name_; }
  bool check_paths() const { return check_paths_; }
  /// Throws ConfigError "key: message (where key was set)".
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw ConfigError(key + ": " + message + " (" + where(key) + ")");
  }

 private:
  Config& config_;
  const KeyOrigins& origins_;
  std::string config_name_;
  bool check_paths_;
};

}  // namespace lat
