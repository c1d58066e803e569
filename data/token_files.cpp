// Token-file readers: raw and headered .bin (plain file reads), HDF5 (C API).
#include "data/token_files.h"

#include <hdf5.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#include "data/hdf5_dataset.h"
#include "data/hdf5_errors.h"
#include "data/hdf5_links.h"
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

// The first three ints of an llm.c header (all 0 when the file is shorter than the header).
struct LlmcHeader {
  int32_t magic = 0, version = 0, count = 0;

  /// Version and count describe a file of `size` bytes exactly, as llm.c writes them.
  bool layout_matches(int64_t size) const {
    if (version != 1 && version != 2) return false;
    return count >= 0 && size == kLlmcHeaderInts * 4 + int64_t{count} * (version == 1 ? 2 : 4);
  }
  /// The magic with one or two bits flipped: raw tokens start with such a pair of ids only by
  /// a one-in-a-billion chance.
  bool magic_nearly_matches() const {
    return magic != kLlmcMagic && std::popcount(static_cast<uint32_t>(magic ^ kLlmcMagic)) <= 2;
  }
};

LlmcHeader read_llmc_header(const std::string& bytes) {
  LlmcHeader h;
  if (static_cast<int64_t>(bytes.size()) < kLlmcHeaderInts * 4) return h;
  std::memcpy(&h.magic, bytes.data(), 4);
  std::memcpy(&h.version, bytes.data() + 4, 4);
  std::memcpy(&h.count, bytes.data() + 8, 4);
  return h;
}

// Bytes looked at to tell a text file from token ids.
constexpr int64_t kTextProbeBytes = 4096;

/// The start of `bytes` (an excerpt for the message) when its first kTextProbeBytes bytes are
/// all printable ASCII, whitespace or well-formed UTF-8 (a character cut by the end of the
/// probe counts); nullopt otherwise or when empty. Token ids are not text: uint16 ids below
/// 256 have a zero high byte, and uint32 ids have zero high bytes.
std::optional<std::string> looks_like_text(const std::string& bytes) {
  const size_t n = std::min(bytes.size(), static_cast<size_t>(kTextProbeBytes));
  if (n == 0) return std::nullopt;
  for (size_t i = 0; i < n;) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    if (byte < 0x80) {
      const bool printable = (byte >= 0x20 && byte < 0x7F) || byte == '\t' || byte == '\n' || byte == '\r' ||
                             byte == '\f' || byte == '\v';
      if (!printable) return std::nullopt;
      ++i;
      continue;
    }
    const size_t extra = byte >= 0xC2 && byte <= 0xDF   ? 1
                         : byte >= 0xE0 && byte <= 0xEF ? 2
                         : byte >= 0xF0 && byte <= 0xF4 ? 3
                                                        : 0;
    if (extra == 0) return std::nullopt;
    for (size_t k = 1; k <= extra && i + k < bytes.size(); ++k)
      if ((static_cast<unsigned char>(bytes[i + k]) & 0xC0) != 0x80) return std::nullopt;
    i += 1 + extra;
  }
  size_t end = std::min<size_t>(bytes.size(), 40);
  while (end < bytes.size() && (static_cast<unsigned char>(bytes[end]) & 0xC0) == 0x80) --end;  // whole characters
  std::string start = bytes.substr(0, end);
  for (char& c : start)
    if (c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v') c = ' ';
  return start;
}

}  // namespace

std::string read_text_file(const std::string& path) {
  if (const std::optional<std::string> kind = non_regular_file_kind(path))
    throw Error("dataset: data.path '" + path + "' " + *kind + ", expected a regular file");
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
  LAT_CHECK(bytes.compare(0, kHdf5Signature.size(), kHdf5Signature) != 0,
            "read_bin_tokens: " << path << " starts with the HDF5 signature: it is an HDF5 file, not raw token ids "
                                << "(set data.format: h5)");
  const LlmcHeader header = read_llmc_header(bytes);
  if (header.magic == kLlmcMagic) {
    LAT_CHECK(header.version == 1 || header.version == 2, "read_bin_tokens: " << path << ": llm.c header version "
                                                                              << header.version
                                                                              << ", expected 1 (uint16) or 2 (uint32)");
    const int64_t width = header.version == 1 ? 2 : 4;
    LAT_CHECK(header.count >= 0 && size == kLlmcHeaderInts * 4 + header.count * width,
              "read_bin_tokens: " << path << ": llm.c header says " << header.count << " tokens of " << width
                                  << " bytes, expected a file of " << kLlmcHeaderInts * 4 + header.count * width
                                  << " bytes, got " << size);
    const char* body = bytes.data() + kLlmcHeaderInts * 4;
    return header.version == 1 ? widen<uint16_t>(body, header.count, path) : widen<uint32_t>(body, header.count, path);
  }
  // A header whose magic alone is damaged would otherwise be read as 256 raw tokens of garbage
  // followed by the data.
  LAT_CHECK(!header.layout_matches(size) && !header.magic_nearly_matches(),
            "read_bin_tokens: " << path << ": a damaged llm.c header: magic " << header.magic << ", expected "
                                << kLlmcMagic << " (version field " << header.version << ", token count "
                                << header.count << ", file of " << size << " bytes)");
  const std::optional<std::string> text = looks_like_text(bytes);
  LAT_CHECK(!text, "read_bin_tokens: " << path << " looks like text, not raw token ids: its first "
                                       << std::min<int64_t>(size, kTextProbeBytes)
                                       << " bytes are printable UTF-8 and whitespace (\"" << *text
                                       << "...\"); set data.format: text");
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
  try {
    check_hard_links_along(file, dataset);
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
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
