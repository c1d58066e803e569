// What a resume may start from (train.resume; DESIGN.md "The command line and the files a run
// writes"). A resumed run overwrites checkpoints from its step on, prunes older ones and trims
// metrics.jsonl to its step, so a checkpoint whose counters are damaged, or one older than
// another checkpoint of out_dir, would destroy complete work. These checks run after the
// checkpoint is read and before anything in out_dir changes; each failure is a ConfigError
// (CLI exit code 2) of one line naming the file, the attribute, expected and found.
#pragma once
#include <cstdint>
#include <string>

#include "train/config/config.h"
#include "train/files/checkpoint.h"

namespace lat {

/// The checkpoint's own counters: step and tokens_seen >= 0, and a file named like
/// checkpoint_file_name(N) must hold step N (its step then also decides whether there is
/// anything left to do before train.max_steps). Throws ConfigError naming `path`.
void check_resume_counters(const Checkpoint& ckpt, const std::string& path);

/// The parts of the checkpoint agree with each other and with `writer`, the train config of its
/// own /config: tokens_seen >= step (every completed step trains on at least one token; no
/// upper bound, since train.batch_size and grad_accum may change on resume); /rng present;
/// /data's step equal to the checkpoint's step and its seed, batch_size and grad_accum equal to
/// writer's; the /optimizer step at most the training step (a step skipped for a non-finite
/// gradient norm makes no update, so the optimizer may lag, never lead); every exp_avg_sq
/// element >= 0 (a running mean of squares: a negative one gives NaN updates). Throws
/// ConfigError naming `path` and the attribute or dataset.
void check_resume_consistency(const Checkpoint& ckpt, const TrainConfig& writer, const std::string& path);

/// Refuses to resume from `path` (at `step`) into `out_dir` when out_dir holds a checkpoint
/// of a higher step: the run would overwrite it, or leave it newer than `latest` and prune
/// it. `named_by_user`: train.resume named `path` itself (else `latest` did). Throws
/// ConfigError naming both files and their steps.
void check_no_newer_checkpoint(int64_t step, const std::string& path, const std::string& out_dir, bool named_by_user);

}  // namespace lat
