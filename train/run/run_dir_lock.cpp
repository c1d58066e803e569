#include "train/run/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lat/error.h"
#include "train/config/config.h"

namespace lat {

RunDirLock::RunDirLock(const std::string& dir) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  LAT_CHECK(fd_ >= 0, "train.out_dir: cannot open '" << dir << "': " << std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int error = errno;
  ::close(fd_);
  fd_ = -1;
  if (error == EWOULDBLOCK)
    throw ConfigError("train.out_dir: '" + dir +
                      "' is in use by another lat train (wait for it to finish, or choose another train.out_dir)");
  throw Error("train.out_dir: cannot lock '" + dir + "': " + std::strerror(error));
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
}

}  // namespace lat
