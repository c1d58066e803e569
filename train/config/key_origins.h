// Where each config key was set, for the errors of the validator: "file:line", "--set key",
// or "not set in <source>". Internal to train/config/.
#pragma once
#include <map>
#include <string>

namespace lat {

/// The places keys were set while a config was loaded (loader.h fills it).
class KeyOrigins {
 public:
  /// `source` (the file or string name) is named for keys that were never set.
  explicit KeyOrigins(std::string source) : source_(std::move(source)) {}

  /// Records that `key` was (last) set at `location`.
  void set(const std::string& key, const std::string& location) { where_[key] = location; }

  /// "file:line" or "--set key" where `key` was last set; "not set in <source>" otherwise.
  std::string where(const std::string& key) const {
    auto it = where_.find(key);
    return it == where_.end() ? "not set in " + source_ : it->second;
  }

  /// Whether `key` was set in the document or an override.
  bool was_set(const std::string& key) const { return where_.count(key) != 0; }

 private:
  std::string source_;
  std::map<std::string, std::string> where_;
};

}  // namespace lat
