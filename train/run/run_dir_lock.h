// One writer per run directory: `lat train` holds an exclusive lock on its train.out_dir for
// the whole run, so a second run started into the same directory stops at once instead of
// interleaving checkpoints, config.yaml and metrics.jsonl with the first.
#pragma once
#include <string>

namespace lat {

/// An exclusive advisory lock (flock(2)) on the directory `dir` itself, so no file is added
/// to the run directory's layout; held until destruction (or process exit). Throws
/// ConfigError naming train.out_dir when another process holds the lock, lat::Error when the
/// directory cannot be opened.
class RunDirLock {
 public:
  explicit RunDirLock(const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace lat
