// One YAML value into one Config field, by the field's type (schema.h): the type errors of
// the config ("key: expected an int, got 'x' (file:line)"). Internal to train/config/.
#pragma once
#include <string>

#include <yaml-cpp/yaml.h>

#include "train/config/schema.h"

namespace lat {

/// What a node is, for "got ..." in messages: 'text', a list, a map, nothing (null).
std::string describe(const YAML::Node& node);

/// "file:line" of `node`.
std::string node_location(const std::string& file, const YAML::Node& node);

/// Where a value comes from: `location` ("file:line" or "--set key") names it in errors; in a
/// file (`file` not empty) the items of lists and maps are named at their own lines.
struct ValueSource {
  std::string location;
  std::string file;
};

/// Sets the field of `spec` in `config` from `value`. Throws ConfigError naming the key, the
/// expected type, what it got and where, or a repeated lr_mult pattern.
void read_value(const KeySpec& spec, const YAML::Node& value, const ValueSource& source, Config& config);

}  // namespace lat
