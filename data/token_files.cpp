// Token-file readers: raw and headered .bin (plain file reads), HDF5 (C API).
#include "data/token_files.h"

#include <hdf5.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#include "data/hdf5_dataset.h"
#include "data/hdf5_errors.h"
#include "data/regular_file.h"
#include "lat/error.h"

namespace lat {
namespace {

constexpr int64_t kLlmcHeaderInts = 256;

// Converts raw little-endian unsigned ids of width sizeof(T) to int32, checking the range.
template <class T>
std::vector<int32_t> widen(const char* bytes, int64_t count, const std::string& path) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    T id;
    std::memcpy(&id, bytes + i * sizeof(T), sizeof(T));
    LAT_CHECK(static_cast<uint64_t>(id) <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()),
              "read_bin_tokens: " << path << ": token id " << static_cast<uint64_t>(id) << " at offset " << i
                                  << " exceeds the largest supported id " << std::numeric_limits<int32_t>::max());
    out[i] = static_cast<int32_t>(id);
  }
  return out;
}

}  // namespace

std::string read_text_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  LAT_CHECK(f != nullptr, "dataset: cannot open data.path '" << path << "': " << std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) bytes.append(buffer, n);
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  LAT_CHECK(!failed, "dataset: error while reading '" << path << "'");
  return bytes;
}

std::vector<int32_t> read_bin_tokens(const std::string& path, const std::string& bin_dtype) {
  std::string bytes = read_text_file(path);
  const int64_t size = static_cast<int64_t>(bytes.size());
  int32_t magic = 0;
  if (size >= kLlmcHeaderInts * 4) std::memcpy(&magic, bytes.data(), 4);
  if (magic == kLlmcMagic) {
    int32_t header[kLlmcHeaderInts];
    std::memcpy(header, bytes.data(), sizeof(header));
    const int32_t version = header[1];
    const int64_t count = header[2];
    LAT_CHECK(version == 1 || version == 2, "read_bin_tokens: " << path << ": llm.c header version " << version
                                                                << ", expected 1 (uint16) or 2 (uint32)");
    const int64_t width = version == 1 ? 2 : 4;
    LAT_CHECK(count >= 0 && size == kLlmcHeaderInts * 4 + count * width,
              "read_bin_tokens: " << path << ": llm.c header says " << count << " tokens of " << width
                                  << " bytes, expected a file of " << kLlmcHeaderInts * 4 + count * width
                                  << " bytes, got " << size);
    const char* body = bytes.data() + kLlmcHeaderInts * 4;
    return version == 1 ? widen<uint16_t>(body, count, path) : widen<uint32_t>(body, count, path);
  }
  LAT_CHECK(bin_dtype == "uint16" || bin_dtype == "uint32",
            "read_bin_tokens: data.bin_dtype: expected uint16 or uint32, got '" << bin_dtype << "'");
  const int64_t width = bin_dtype == "uint16" ? 2 : 4;
  LAT_CHECK(size % width == 0, "read_bin_tokens: " << path << ": " << size << " bytes is not a whole number of "
                                                   << bin_dtype << " tokens (data.bin_dtype)");
  return width == 2 ? widen<uint16_t>(bytes.data(), size / 2, path) : widen<uint32_t>(bytes.data(), size / 4, path);
}

std::vector<int32_t> read_h5_tokens(const std::string& path, const std::string& dataset) {
  if (std::optional<std::string> kind = non_regular_file_kind(path))
    throw Error("read_h5_tokens: data.path '" + path + "' " + *kind + ", expected a regular HDF5 file");
  std::FILE* probe = std::fopen(path.c_str(), "rb");
  LAT_CHECK(probe != nullptr, "dataset: cannot open data.path '" << path << "': " << std::strerror(errno));
  std::fclose(probe);
  std::error_code ec;
  const uintmax_t file_bytes = std::filesystem::file_size(path, ec);
  LAT_CHECK(!ec, "read_h5_tokens: cannot read the size of '" << path << "': " << ec.message());
  SilenceHdf5Errors quiet;
  LAT_CHECK(H5Fis_hdf5(path.c_str()) > 0, "read_h5_tokens: " << path << " is not an HDF5 file");
  const std::string where = "read_h5_tokens: " + path + ": ";
  Hdf5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, where + "cannot open as HDF5");
  LAT_CHECK(H5Lexists(file, dataset.c_str(), H5P_DEFAULT) > 0,
            "read_h5_tokens: " << path << " has no dataset '" << dataset << "' (data.h5_dataset)");
  Hdf5Handle data(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT), H5Dclose,
                  where + "'" + dataset + "' is not a dataset (data.h5_dataset)");
  Hdf5Handle type(H5Dget_type(data), H5Tclose, where + "cannot read the type of dataset '" + dataset + "'");
  LAT_CHECK(H5Tget_class(type) == H5T_INTEGER,
            "read_h5_tokens: " << path << ": dataset '" << dataset
                               << "': expected integer token ids, got a non-integer type");
  const int64_t count = checked_dataset_extent(data, file_bytes, where + "dataset '" + dataset + "'").count;
  std::vector<int64_t> ids(static_cast<size_t>(count));
  if (count > 0)
    check_hdf5(H5Dread(data, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data()),
               where + "reading dataset '" + dataset + "' failed");
  std::vector<int32_t> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    LAT_CHECK(ids[i] >= 0 && ids[i] <= std::numeric_limits<int32_t>::max(),
              "read_h5_tokens: " << path << ": token id " << ids[i] << " at offset " << i
                                 << " is outside [0, " << std::numeric_limits<int32_t>::max() << "]");
    out[i] = static_cast<int32_t>(ids[i]);
  }
  return out;
}

}  // namespace lat
