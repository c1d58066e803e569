// File readers open regular files only: opening a FIFO blocks until some writer appears, and a
// device such as /dev/zero never ends, so a path naming either would hang a command instead of
// failing. The check runs before the file is opened.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace lat {

/// Why `path` (symlinks followed) exists but is no regular file, as a phrase to follow the
/// quoted path in a message: "is a directory", "is a FIFO", "is a character device", "is a
/// block device", "is a socket" or "is not a regular file". nullopt for a regular file and for
/// a missing path (the reader's open reports that in its own words).
std::optional<std::string> non_regular_file_kind(const std::string& path);

/// The bytes of the regular file `path`, which must hold at most `max_bytes` (checked before
/// reading). Throws lat::Error "'<path>' (<what>): ..." when it is missing, unreadable, not a
/// regular file, or larger.
std::string read_bounded_file(const std::string& path, size_t max_bytes, const std::string& what);

}  // namespace lat
