// The regular-file check of readers (regular_file.h).
#include "data/regular_file.h"

#include <filesystem>
#include <system_error>

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

}  // namespace lat
