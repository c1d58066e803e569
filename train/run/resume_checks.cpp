// Checks before a resume changes anything (resume_checks.h).
#include "train/run/resume_checks.h"

#include <filesystem>
#include <sstream>

#include "train/config/config.h"
#include "train/files/run_dir.h"
#include "train/text/format.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

[[noreturn]] void damaged(const std::string& path, const std::string& attribute, const std::string& expected,
                          int64_t found) {
  throw ConfigError("resume: '" + path + "': attribute " + attribute + ": expected " + expected + ", found " +
                    std::to_string(found) + " (a damaged checkpoint; nothing in train.out_dir was changed)");
}

[[noreturn]] void damaged(const std::string& path, const std::string& what, const std::string& problem) {
  throw ConfigError("resume: '" + path + "': " + what + ": " + problem +
                    " (a damaged checkpoint; nothing in train.out_dir was changed)");
}

/// /data attribute `name` equal to `expected` (`meaning` says where that comes from).
void check_data_counter(const Checkpoint& ckpt, const std::string& path, const std::string& name, int64_t expected,
                        const std::string& meaning) {
  const auto it = ckpt.data.counters.find(name);
  if (it == ckpt.data.counters.end())
    damaged(path, "/data attribute '" + name + "'", "missing; expected " + std::to_string(expected) + " (" + meaning + ")");
  if (it->second != expected)
    damaged(path, "/data attribute '" + name + "'",
            "expected " + std::to_string(expected) + " (" + meaning + "), found " + std::to_string(it->second));
}

}  // namespace

void check_resume_consistency(const Checkpoint& ckpt, const TrainConfig& writer, const std::string& path) {
  if (ckpt.tokens_seen < ckpt.step)
    damaged(path, "tokens_seen", ">= " + std::to_string(ckpt.step) + " (at least one token for each of its " +
                                     std::to_string(ckpt.step) + " steps)",
            ckpt.tokens_seen);
  if (ckpt.rng_state.empty())
    damaged(path, "/rng", "missing; expected the generator state every training checkpoint holds (a weights-only "
                          "file starts a new run with init_from)");
  check_data_counter(ckpt, path, "step", ckpt.step, "the checkpoint's step");
  check_data_counter(ckpt, path, "seed", writer.seed, "train.seed in its /config");
  check_data_counter(ckpt, path, "batch_size", writer.batch_size, "train.batch_size in its /config");
  check_data_counter(ckpt, path, "grad_accum", writer.grad_accum, "train.grad_accum in its /config");
  if (!ckpt.optimizer.type.empty() && ckpt.optimizer.step > ckpt.step)
    damaged(path, "/optimizer attribute 'step'",
            "expected at most the training step " + std::to_string(ckpt.step) +
                " (a skipped step makes no update), found " + std::to_string(ckpt.optimizer.step));
  for (const CheckpointParamState& param : ckpt.optimizer.params)
    for (const auto& [buffer, tensor] : param.buffers) {
      if (buffer != "exp_avg_sq") continue;
      const float* values = tensor.data<float>();
      for (int64_t i = 0; i < tensor.numel(); ++i)
        if (values[i] < 0.0f)
          damaged(path, "/optimizer/" + param.name + "/exp_avg_sq",
                  "element " + std::to_string(i) + " is " + format_significant(values[i]) +
                      "; expected >= 0 (a running mean of squared gradients)");
    }
}

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
