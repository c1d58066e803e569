// Helpers shared by the tests that read and write files (checkpoints, safetensors, export,
// fine-tuning, config, trainer, generation): a fresh temporary directory per test, whole-file
// reads and writes, an HDF5 attribute overwritten in place, and a config from model YAML
// lines. Errors are asserted with tests/expect_error.h.
#pragma once
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>

#include "lat/error.h"
#include "train/config/config.h"

namespace lat::testing {

/// <system temp>/<prefix><test name>_<pid>, emptied and created. The test name keeps tests
/// apart and the pid keeps concurrent runs (ctest -j) apart; '/' of parameterized test names
/// becomes '_' so the directory is one level deep.
inline std::filesystem::path fresh_temp_dir(const std::string& prefix) {
  std::string name = prefix + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// A fresh_temp_dir for the scope of one object (inside a TEST body), removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) : dir_(fresh_temp_dir(prefix)) {}
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover directory is harmless
    std::filesystem::remove_all(dir_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  /// dir/name as a string.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

/// GoogleTest fixture base: a fresh_temp_dir("lat_test_<test suite>_") in dir_ for every test,
/// removed in TearDown. A fixture with nothing of its own is an alias (using CheckpointTest =
/// TempDirTest); derived fixtures call the base SetUp / TearDown when they override them.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_temp_dir(std::string("lat_test_") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// dir_/name as a string.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Writes `text` to dir_/name and returns that path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }

  std::filesystem::path dir_;
};

/// The whole file as bytes ("" when it cannot be opened).
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

/// Replaces the file's contents with `bytes` (creating it).
inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

/// Overwrites the existing int64 attribute `name` of the root group of the HDF5 file at
/// `path` (e.g. a checkpoint's version, to reach the version check). A fatal failure when the
/// file does not open: call under ASSERT_NO_FATAL_FAILURE.
inline void overwrite_int64_attribute(const std::string& path, const char* name, int64_t value) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  const hid_t attr = H5Aopen(file, name, H5P_DEFAULT);
  H5Awrite(attr, H5T_NATIVE_INT64, &value);
  H5Aclose(attr);
  H5Fclose(file);
}

/// Overwrites the existing int64 attribute `name` of the object at `object` (e.g. "/data") of
/// the HDF5 file at `path`. Call under ASSERT_NO_FATAL_FAILURE.
inline void overwrite_object_attribute(const std::string& path, const char* object, const char* name, int64_t value) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  // The object opened first: HDF5 1.10.8's H5Aopen_by_name writes into the root group's
  // attribute of the same name when the root keeps its attributes in dense storage.
  const hid_t loc = H5Oopen(file, object, H5P_DEFAULT);
  const hid_t attr = loc >= 0 ? H5Aopen(loc, name, H5P_DEFAULT) : -1;
  const herr_t written = attr >= 0 ? H5Awrite(attr, H5T_NATIVE_INT64, &value) : -1;
  if (attr >= 0) H5Aclose(attr);
  if (loc >= 0) H5Oclose(loc);
  ASSERT_GE(H5Fclose(file), 0) << path;
  ASSERT_GE(written, 0) << path << ": " << object << " attribute " << name;
}

/// True when `part` occurs in `text`.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// parse_config of "model:" followed by `model_yaml` (indented lines) and a data.path line
/// (never read by parse_config), as "test.yaml".
inline Config model_config(const std::string& model_yaml, const std::string& data_path = "corpus.txt") {
  return parse_config("model:\n" + model_yaml + "data:\n  path: " + data_path + "\n", "test.yaml");
}

}  // namespace lat::testing
