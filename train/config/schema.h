// The config schema (DESIGN.md "Config"): one row per key, in the documented order, carrying
// the key's name, the Config field behind it (whose alternative is the key's YAML type, and
// whose initializer in config_types.h is its default), the values it allows on its own, and
// the rule that checks it against earlier keys or resolves a derived default (defined beside
// the table in schema.cpp). Parsing (loader.h), validation (validate.h), to_yaml and the
// resume comparison all walk this one table, so a key added here is handled everywhere at
// once. Internal to train/config/.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "train/config/config_types.h"

namespace lat {

/// The most tokens per sequence: data.block_size, and the lengths `lat eval` and `lat
/// generate` accept, so that no value asks for a sequence the machine cannot hold.
inline constexpr int64_t kMaxBlockSize = int64_t{1} << 20;

/// The largest model.norm_eps (and a Hugging Face config.json's rms_norm_eps): models use
/// 1e-6 to 1e-5; an epsilon far above the mean square of the activations flattens every
/// normalized vector towards 0, a model that loads and then writes only one token.
inline constexpr double kMaxNormEps = 1.0;

class Validation;

/// lr_mult's value: (glob, multiplier) in file order.
using FloatMap = std::vector<std::pair<std::string, double>>;

/// A pointer to the Config field behind a key; the alternative gives the key's YAML type.
using FieldPtr = std::variant<int64_t*, double*, bool*, std::string*, std::array<double, 2>*,
                              std::vector<std::string>*, FloatMap*, std::vector<int64_t>*, DocSeparator*>;

/// The floats a key allows: above (or from) `low`, below (or up to) `high` when given.
struct FloatRange {
  double low = 0.0;
  bool low_open = false;  // true: value > low; false: value >= low
  std::optional<double> high = std::nullopt;
  bool high_open = false;  // true: value < high; false: value <= high
  const char* note = "";   // appended to the expectation, e.g. " (0 = off)"
};

/// The values a key allows on its own. Which parts apply follows the key's type: ints and
/// each of a list of ints `min_int` and `max_int`; floats, each of a list of floats and each
/// multiplier of a map `range`; strings `one_of` and `if_empty`; each item of a list of
/// strings and each pattern of a map `if_empty`.
struct Bounds {
  std::optional<int64_t> min_int = std::nullopt;
  std::optional<int64_t> max_int = std::nullopt;  // ints: an upper bound on what lat can run
  std::optional<FloatRange> range = std::nullopt;
  std::vector<std::string> one_of = {};  // empty: any string
  const char* if_empty = nullptr;   // the error for an empty string; nullptr: empty is allowed
};

/// One schema row.
struct KeySpec {
  const char* key;
  FieldPtr (*field)(Config&);
  Bounds bounds = {};
  /// Checks against earlier keys and derived defaults, run right after this key's bounds.
  void (*rule)(Validation&) = nullptr;
  bool nullable = false;  // a string key whose default is "not set" (YAML null accepted)
};

/// The rows, in DESIGN.md's order; to_yaml writes the keys in this order.
const std::vector<KeySpec>& schema();

/// Sections hold keys; in a file they are nested maps or a prefix of dotted keys.
const std::vector<std::string>& sections();

/// The row of `key`, or nullptr when there is none.
const KeySpec* find_key(const std::string& key);

/// Whether `key` names a section.
bool is_section(const std::string& key);

/// Every key and section name, for "did you mean" suggestions.
std::vector<std::string> all_key_names();

}  // namespace lat
