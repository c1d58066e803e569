// The files of a run directory besides the checkpoints' contents (DESIGN.md "The command line
// and the files a run writes"): checkpoint file names, `latest`, pruning old checkpoints,
// stale temporary files, and metrics.jsonl cleanup on resume.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lat {

/// "ckpt_00000100.h5" for step 100.
std::string checkpoint_file_name(int64_t step);

/// The step a checkpoint file name carries: `name` must be exactly what
/// checkpoint_file_name(step) gives for an int64 step >= 0 (8 digits, zero-padded, or more
/// digits without leading zeros). nullopt for any other name.
std::optional<int64_t> checkpoint_step(const std::string& name);

/// The ckpt_*.h5 files of a run directory.
struct CheckpointListing {
  /// (step, file name) of each name checkpoint_step reads, oldest first.
  std::vector<std::pair<int64_t, std::string>> checkpoints;
  /// The other ckpt_*.h5 names, sorted.
  std::vector<std::string> ignored;
};

/// Lists `out_dir` (regular files only; a missing directory lists nothing).
CheckpointListing list_checkpoints(const std::string& out_dir);

/// Receives a one-line warning (without the "warning: " prefix).
using WarningSink = std::function<void(const std::string&)>;

/// Writes "warning: <line>" and a newline to stderr (the CLI's log stream).
void warn_on_stderr(const std::string& line);

/// Points `out_dir/latest` at `file_name` (a name inside out_dir), atomically through
/// latest.tmp and a rename. Throws lat::Error when it cannot be written.
void write_latest(const std::string& out_dir, const std::string& file_name);

/// The newest checkpoint of a run directory: the one `latest` names, or, when there is no
/// `latest` (a run killed between the two renames), the ckpt_*.h5 with the highest step; or,
/// when exactly one ckpt_*.h5 is newer than the one `latest` names and was written after
/// `latest` (a run killed between publishing it and updating `latest`), that one, with a
/// warning to `warn`.
/// nullopt when the directory holds none. A ckpt_*.h5 whose name carries no int64 step in
/// checkpoint_file_name's form (a stray copy, ckpt_99999999999999999999.h5) is ignored with a
/// warning to `warn`. Throws lat::Error when `latest` is not a regular file (a FIFO would
/// block the read) or names a missing file.
std::optional<std::string> find_latest_checkpoint(const std::string& out_dir, const WarningSink& warn = warn_on_stderr);

/// A checkpoint path from what a user gave: a file is returned as it is; a run directory
/// gives its latest checkpoint (find_latest_checkpoint, warning to `warn`). Throws ConfigError
/// (the user's input: exit code 2) when `path` does not exist, is neither a regular file nor a
/// directory (a FIFO, a device), or the directory holds no checkpoint.
std::string resolve_checkpoint(const std::string& path, const WarningSink& warn = warn_on_stderr);

/// Deletes all but the newest `keep_last` checkpoints of `out_dir` (0 = keep all), never
/// the one `latest` names; ignored names (list_checkpoints) are left alone. Returns the
/// removed file names.
std::vector<std::string> prune_checkpoints(const std::string& out_dir, int64_t keep_last);

/// Deletes the temporary files an interrupted run may leave in `out_dir`
/// (ckpt_*.h5.tmp, latest.tmp, metrics.jsonl.tmp, config.yaml.tmp). Returns their names.
std::vector<std::string> clean_stale_tmp(const std::string& out_dir);

/// Prepares metrics.jsonl for a resume from checkpoint `step`: drops the records whose
/// "step" is above it and lines that do not parse as JSON (a line torn by a crash), and makes
/// the file end with a newline; rewrites it atomically when anything changes. A missing file
/// is left missing; one that is not a regular file is a lat::Error. Returns the number of
/// lines dropped.
int64_t truncate_metrics(const std::string& path, int64_t step);

}  // namespace lat
