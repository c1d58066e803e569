// Writing a file so that a reader (or a crash) sees the old file or the new one, never a
// partial one: the content goes to `<path>.tmp`, which is flushed and renamed over `path`.
// Every text and binary file lat writes goes through here (the HDF5 checkpoint has its own
// path in checkpoint.cpp, since HDF5 opens the file itself).
#pragma once
#include <functional>
#include <ostream>
#include <string>

namespace lat {

/// Writes `path` atomically: `write` fills `<path>.tmp` (binary, truncated), which is then
/// flushed and renamed over `path`. On any failure (open, write, rename, or an exception from
/// `write`) the temporary file is removed and `path` is left as it was; failures throw
/// lat::Error "<who>: cannot open|write|rename ..." naming the file and the reason.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write,
                           const std::string& who);

/// write_file_atomically with `text` as the whole content.
void write_text_atomically(const std::string& path, const std::string& text, const std::string& who);

}  // namespace lat
