// The files of a run directory besides the checkpoints' contents (DESIGN.md "The command line
// and the files a run writes"): checkpoint file names, `latest`, pruning old checkpoints,
// stale temporary files, and metrics.jsonl cleanup on resume.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lat {

/// "ckpt_00000100.h5" for step 100.
std::string checkpoint_file_name(int64_t step);

/// Points `out_dir/latest` at `file_name` (a name inside out_dir), atomically through
/// latest.tmp and a rename. Throws lat::Error when it cannot be written.
void write_latest(const std::string& out_dir, const std::string& file_name);

/// The newest checkpoint of a run directory: the one `latest` names, or, when there is no
/// `latest` (a run killed between the two renames), the ckpt_*.h5 with the highest step.
/// nullopt when the directory holds none. Throws lat::Error when `latest` names a missing file.
std::optional<std::string> find_latest_checkpoint(const std::string& out_dir);

/// A checkpoint path from what a user gave: a file is returned as it is; a run directory
/// gives its latest checkpoint. Throws ConfigError (the user's input: exit code 2) when `path`
/// does not exist or the directory holds no checkpoint.
std::string resolve_checkpoint(const std::string& path);

/// Deletes all but the newest `keep_last` ckpt_*.h5 files of `out_dir` (0 = keep all), never
/// the one `latest` names. Returns the removed file names.
std::vector<std::string> prune_checkpoints(const std::string& out_dir, int64_t keep_last);

/// Deletes the temporary files an interrupted run may leave in `out_dir`
/// (ckpt_*.h5.tmp, latest.tmp, metrics.jsonl.tmp, config.yaml.tmp). Returns their names.
std::vector<std::string> clean_stale_tmp(const std::string& out_dir);

/// Prepares metrics.jsonl for a resume from checkpoint `step`: drops the records whose
/// "step" is above it and lines that do not parse as JSON (a line torn by a crash), and makes
/// the file end with a newline; rewrites it atomically when anything changes. A missing file
/// is left missing. Returns the number of lines dropped.
int64_t truncate_metrics(const std::string& path, int64_t step);

}  // namespace lat
