// Helpers shared by the tests of config keys: a run.yaml snippet parsed with the required
// data.path line, and an exact ConfigError expected from one.
#pragma once
#include <source_location>
#include <string>

#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "train/config/config.h"

namespace lat::testing {

/// parse_config of `yaml` after a "data.path: corpus.txt" line (the key is required), as
/// "run.yaml": the snippet's first line is line 2.
inline Config parse(const std::string& yaml) { return parse_config("data.path: corpus.txt\n" + yaml, "run.yaml"); }

/// Expects parse(yaml) to throw a ConfigError whose message is exactly `expected`.
inline void expect_config_error(const std::string& yaml, const std::string& expected,
                                std::source_location where = std::source_location::current()) {
  const std::string message = expect_error<ConfigError>([&] { parse(yaml); }, {expected}, where);
  EXPECT_EQ(message, expected) << "at line " << where.line();
}

}  // namespace lat::testing
