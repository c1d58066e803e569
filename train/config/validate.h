// The one validator of a loaded config: every key's bounds from its schema row, each followed
// by the row's rule (checks against earlier keys, derived defaults), in schema order, so the
// first problem in DESIGN.md's order is the one reported. Internal to train/config/.
#pragma once
#include <string>

#include "train/config/config.h"
#include "train/config/loader.h"

namespace lat {

/// What a rule sees: the config being checked (rules resolve derived defaults in it), where
/// each key was set, the config's name and whether paths must exist.
class Validation {
 public:
  /// `config_name` names the default out_dir; `check_paths` asks that init_from and a resume
  /// path exist.
  Validation(Loader& loader, std::string config_name, bool check_paths);

  Config& config() { return loader_.config(); }
  bool was_set(const std::string& key) const { return loader_.was_set(key); }
  const std::string& config_name() const { return config_name_; }
  bool check_paths() const { return check_paths_; }
  /// Throws ConfigError "key: message (where key was set)".
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

 private:
  Loader& loader_;
  std::string config_name_;
  bool check_paths_;
};

/// Checks every value of `v.config()` and resolves the derived defaults (model.head_dim,
/// model.attn.n_kv_heads, train.out_dir). Throws ConfigError at the first problem.
void validate(Validation& v);

}  // namespace lat
