// What every fuzz harness shares: a scratch directory of its own where each input is written
// as the file(s) a reader opens, and the check that a reader left no HDF5 object open.
#pragma once
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace lat::fuzz {

/// <system temp>/lat_fuzz_<pid>: created on first use, removed at exit. One per process, so
/// harnesses running side by side never share a file.
inline const std::filesystem::path& scratch_dir() {
  struct ScratchDir {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("lat_fuzz_" + std::to_string(::getpid()));
    ScratchDir() {
      std::filesystem::remove_all(path);
      std::filesystem::create_directories(path);
    }
    ~ScratchDir() {
      std::error_code ignored;  // a leftover directory in the temp dir is harmless
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const ScratchDir dir;
  return dir.path;
}

/// Replaces `path` by a new file holding `size` bytes of `data`. The old file is unlinked
/// first, so the new one is a new inode: HDF5 recognises an already open file by its inode,
/// and a handle leaked by an earlier input must not make it read stale state.
inline void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::filesystem::remove(path);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

/// Aborts (a finding) when HDF5 objects are still open after `reader` returned or threw: a
/// handle leaked on an error path keeps the file and its memory until the process ends.
inline void expect_no_open_hdf5_objects(const char* reader) {
  const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open != 0) {
    std::fprintf(stderr, "fuzz: %s left %zd HDF5 object(s) open\n", reader, open);
    std::abort();
  }
}

}  // namespace lat::fuzz
