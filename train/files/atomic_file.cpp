// The temporary-file-and-rename write (atomic_file.h).
#include "train/files/atomic_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lat/error.h"

namespace lat {

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write,
                           const std::string& who) {
  const std::string tmp = path + ".tmp";
  auto remove_tmp = [&] {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  };
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(who + ": cannot open '" + tmp + "' for writing: " + std::strerror(errno));
    try {
      write(out);
    } catch (...) {
      out.close();
      remove_tmp();
      throw;
    }
    out.flush();
    if (!out) {
      const std::string reason = std::strerror(errno);  // before close() and remove() touch errno
      out.close();
      remove_tmp();
      throw Error(who + ": cannot write '" + tmp + "': " + reason);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string reason = ec.message();
    remove_tmp();
    throw Error(who + ": cannot rename '" + tmp + "' to '" + path + "': " + reason);
  }
}

void write_text_atomically(const std::string& path, const std::string& text, const std::string& who) {
  write_file_atomically(path, [&](std::ostream& out) { out << text; }, who);
}

}  // namespace lat
