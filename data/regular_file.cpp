// The regular-file check of readers (regular_file.h).
#include "data/regular_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "lat/error.h"

namespace fs = std::filesystem;

namespace lat {

std::optional<std::string> non_regular_file_kind(const std::string& path) {
  std::error_code ec;
  switch (fs::status(path, ec).type()) {
    case fs::file_type::regular:
    case fs::file_type::not_found: return std::nullopt;
    case fs::file_type::directory: return "is a directory";
    case fs::file_type::fifo: return "is a FIFO";
    case fs::file_type::character: return "is a character device";
    case fs::file_type::block: return "is a block device";
    case fs::file_type::socket: return "is a socket";
    default: return ec ? "cannot be examined (" + ec.message() + ")" : "is not a regular file";
  }
}

std::string read_bounded_file(const std::string& path, size_t max_bytes, const std::string& what) {
  const std::string subject = "'" + path + "' (" + what + ")";
  if (const std::optional<std::string> kind = non_regular_file_kind(path))
    throw Error(subject + " " + *kind + ", expected a regular file");
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw Error(subject + ": cannot open: " + ec.message());
  if (size > max_bytes)
    throw Error(subject + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                " lat reads");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(subject + ": cannot open: " + std::strerror(errno));
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (in.gcount() != static_cast<std::streamsize>(size))
    throw Error(subject + ": reading " + std::to_string(size) + " bytes failed");
  return bytes;
}

}  // namespace lat
