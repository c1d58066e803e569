// `lat train`: the training loop (DESIGN.md "The command line and the files a run
// writes", "Checkpoint", "Config").
//
// A run: resolve where to start (train.resume: auto = the newest checkpoint of out_dir,
// never, or a path), load the data and build the model, then per optimizer step s = 1, 2, ...:
// grad_accum micro-batches of batch_size windows (a pure function of (seed, s, micro), so the
// step is the data position), the loss being the token-weighted mean over the whole step;
// global-norm clipping (a non-finite norm skips the step with a warning); one AdamW/SGD update
// at lr = schedule(s). Every log_every steps a metrics.jsonl record and a progress line;
// every eval_every steps the loss on eval_batches random val batches; every ckpt_every steps a
// checkpoint (keep_last pruning, `latest`). At max_steps the loss on the whole val split, then
// a final checkpoint; a checkpoint is also written when the run ends at train.stop_at or on
// SIGINT/SIGTERM (the step in progress is finished first; the process then exits 0; one still
// running 3 s after the signal ends the process without a checkpoint: train/run/signals.h).
#pragma once
#include "train/config/config.h"
#include "train/run/run_options.h"

namespace lat {

/// Trains as `config` says (a config from load_config: validated and resolved).
/// Under `mpirun -np N` (train/distributed/distributed.h) the N ranks train one model data-parallel: each
/// takes its rows of every micro-batch (train.batch_size must divide by N: ConfigError), the
/// gradients are summed over the ranks so the update equals the 1-rank one, and rank 0 alone
/// writes metrics, progress and checkpoints. There a failure on any rank prints
/// "error: rank R: ..." and ends the whole job (exit 2 for a config error, 1 otherwise)
/// instead of throwing.
/// Throws ConfigError (CLI exit 2) for a config that cannot run here: resuming with keys that
/// may not change (listed), train.resume never with checkpoints in out_dir, CUDA in a build
/// without it, freeze or lr_mult patterns that match no parameter, text with characters
/// outside an init_from checkpoint's vocabulary (init_from_strict), and a resume that could
/// destroy complete work (train/run/resume_checks.h: a step that disagrees with the file name
/// or is negative, a newer checkpoint in out_dir, a parameter without optimizer state), all
/// found before out_dir changes. ckpt_*.h5 names that carry no step are ignored with a warning.
/// Fine-tuning (train/run/finetune.h): a fresh run with init_from starts from that model's weights
/// (shapes checked one by one) and tokenizer, and logs the val loss at step 0; frozen
/// parameters keep no gradient and no optimizer state and are listed in the checkpoint's
/// `frozen` attribute; lr_mult scales the learning rate per parameter.
/// Throws lat::Error (exit 1) when a checkpoint cannot be read (naming the file, which is
/// left untouched), init_from does not fit the model (naming every parameter and both shapes),
/// data is bad, the training loss is not finite (naming the step; the last good checkpoint
/// is kept), or out_dir gained a checkpoint at or above the step about to be saved (it is
/// kept; nothing is written).
TrainSummary train(const Config& config, const TrainOptions& options = {});

}  // namespace lat
