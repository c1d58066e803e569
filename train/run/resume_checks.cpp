// Checks before a resume changes anything (resume_checks.h).
#include "train/run/resume_checks.h"

#include <filesystem>
#include <sstream>

#include "train/config/config.h"
#include "train/files/run_dir.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

[[noreturn]] void damaged(const std::string& path, const std::string& attribute, const std::string& expected,
                          int64_t found) {
  throw ConfigError("resume: '" + path + "': attribute " + attribute + ": expected " + expected + ", found " +
                    std::to_string(found) + " (a damaged checkpoint; nothing in train.out_dir was changed)");
}

}  // namespace

void check_resume_counters(const Checkpoint& ckpt, const std::string& path) {
  if (ckpt.step < 0) damaged(path, "step", ">= 0", ckpt.step);
  if (ckpt.tokens_seen < 0) damaged(path, "tokens_seen", ">= 0", ckpt.tokens_seen);
  // A name lat wrote carries the step; a copy under another name (train.resume: best.h5) has
  // only its attribute to go by.
  const std::optional<int64_t> named = checkpoint_step(fs::path(path).filename().string());
  if (named && *named != ckpt.step)
    damaged(path, "step", std::to_string(*named) + " (the step its file name carries)", ckpt.step);
}

void check_no_newer_checkpoint(int64_t step, const std::string& path, const std::string& out_dir, bool named_by_user) {
  const CheckpointListing listing = list_checkpoints(out_dir);
  if (listing.checkpoints.empty() || listing.checkpoints.back().first <= step) return;
  const auto& [newest_step, newest_name] = listing.checkpoints.back();
  const std::string newest = (fs::path(out_dir) / newest_name).string();
  std::ostringstream message;
  message << "resume: ";
  if (named_by_user)
    message << "train.resume names '" << path << "'";
  else
    message << "'" << (fs::path(out_dir) / "latest").string() << "' names '" << path << "'";
  message << " (step " << step << "), but train.out_dir holds the newer '" << newest << "' (step " << newest_step
          << "); resuming from the older one would overwrite or prune it, so nothing was changed: ";
  // Resuming from the newer file is advice only when that file reads back whole.
  std::string unreadable;
  try {
    load_checkpoint(newest);
  } catch (const Error& e) {
    unreadable = e.what();
  }
  if (unreadable.empty())
    message << "resume from it with train.resume: " << newest << ", move it out of train.out_dir, or choose "
            << "another train.out_dir";
  else
    message << "it cannot be read (" << unreadable << "), so move it out of train.out_dir, or choose another "
            << "train.out_dir";
  throw ConfigError(message.str());
}

}  // namespace lat
