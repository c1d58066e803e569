// A refusing command must lose nothing: RunDirSnapshot records every file of a run directory
// (its subdirectories too) byte for byte, and expect_unchanged fails at the caller's line
// naming each file added, removed or changed since.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <source_location>
#include <string>

#include "tests/test_files.h"

namespace lat::testing {

/// The bytes of every regular file under a directory, by path relative to it.
class RunDirSnapshot {
 public:
  explicit RunDirSnapshot(const std::filesystem::path& dir) : dir_(dir), files_(read_all(dir)) {}

  /// The bytes `name` (relative to the directory) had when the snapshot was taken; a test
  /// failure and "" when it had no such file.
  const std::string& bytes(const std::string& name) const {
    static const std::string none;
    const auto it = files_.find(name);
    if (it == files_.end()) {
      ADD_FAILURE() << "RunDirSnapshot: no file '" << name << "' in " << dir_;
      return none;
    }
    return it->second;
  }

  /// Expects the directory to hold exactly the same files, each byte-identical.
  void expect_unchanged(std::source_location where = std::source_location::current()) const {
    const std::map<std::string, std::string> now = read_all(dir_);
    const char* file = where.file_name();
    const int line = static_cast<int>(where.line());
    for (const auto& [name, bytes] : files_) {
      const auto it = now.find(name);
      if (it == now.end())
        ADD_FAILURE_AT(file, line) << name << " was removed from " << dir_;
      else if (it->second != bytes)
        ADD_FAILURE_AT(file, line) << name << " changed in " << dir_;
    }
    for (const auto& [name, bytes] : now)
      if (!files_.count(name)) ADD_FAILURE_AT(file, line) << name << " was added to " << dir_;
  }

 private:
  static std::map<std::string, std::string> read_all(const std::filesystem::path& dir) {
    std::map<std::string, std::string> files;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
      if (entry.is_regular_file())
        files[std::filesystem::relative(entry.path(), dir).string()] = read_bytes(entry.path());
    return files;
  }

  std::filesystem::path dir_;
  std::map<std::string, std::string> files_;
};

}  // namespace lat::testing
