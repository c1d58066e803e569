// Checkpoints (DESIGN.md "Checkpoint (HDF5)"): the HDF5 file a run writes and resumes from.
// A checkpoint is written to `<path>.tmp`, flushed, closed, then renamed, so a complete
// checkpoint is never replaced by a partial one. The other files of a run directory are in
// run_dir.h.
//
// Layout (strings are variable-length UTF-8 unless said otherwise):
//   /                 attrs format="lat-checkpoint", version=2 (int64), step, tokens_seen (int64),
//                     val_loss, best_val_loss (float64), lat_version, created (ISO 8601),
//                     frozen (1-D string array), world_size (int64)
//   /config           string dataset: the resolved YAML
//   /tokenizer        attr type (char|byte|bpe|sentencepiece|none); string dataset `vocab` (char
//                     only); uint8 dataset `file` (bpe, sentencepiece: the tokenizer.json or
//                     .model the tokenizer was read from, byte for byte)
//   /model/<name>     f32 dataset per parameter, in the tensor's shape (flat group, dotted names)
//   /optimizer        attrs type, step (int64); /optimizer/<name>/<buffer> f32 datasets
//                     (exp_avg, exp_avg_sq for AdamW; momentum_buffer for SGD)
//   /rng              string dataset: the generator state (Generator::state())
//   /data             int64 attrs (loader counters); string dataset `state`
// Every dataset carries attr crc32 (version 2; version 1 files have none): the CRC-32
// (checksum.h) of its data, for a tensor of its f32 elements (tensor_crc32), for a string of
// its UTF-8 bytes, as 8 lower-case hex digits in a fixed-length (NULLPAD) string. The file is
// written in the newest format of the installed HDF5 (1.10: checksummed metadata), so reading
// it needs HDF5 >= 1.10.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// The checkpoint layout version this lat writes and the newest it reads. Version 2 added the
/// per-dataset crc32 attribute; version 1 files load without it.
constexpr int64_t kCheckpointVersion = 2;

/// Optimizer state of one parameter: its named buffers (same shape as the parameter).
struct CheckpointParamState {
  std::string name;                                    // the parameter's name, as in /model
  std::vector<std::pair<std::string, Tensor>> buffers;  // e.g. {exp_avg, exp_avg_sq}
};

/// The optimizer part of a checkpoint. Frozen parameters have no entry. (Named apart from
/// optim/optimizer.h's OptimizerState, the live optimizer's buffers by name.)
struct CheckpointOptimizer {
  std::string type;  // "adamw" or "sgd"; empty = no optimizer saved (no /optimizer group)
  int64_t step = 0;
  std::vector<CheckpointParamState> params;
};

/// The data loader's position, so that resume draws the same batches.
struct DataState {
  std::map<std::string, int64_t> counters;  // int64 attrs of /data
  std::string state;                        // e.g. the loader generator's state
};

/// Everything a run needs to resume exactly, or to start fine-tuning from its weights.
struct Checkpoint {
  int64_t step = 0;         // completed optimizer steps
  int64_t tokens_seen = 0;
  double val_loss = std::numeric_limits<double>::quiet_NaN();       // NaN: not evaluated yet
  double best_val_loss = std::numeric_limits<double>::quiet_NaN();
  std::string lat_version;  // empty: save_checkpoint writes lat::version()
  std::string created;      // ISO 8601 UTC; empty: save_checkpoint writes the current time
  std::vector<std::string> frozen;  // names of frozen parameters
  int64_t world_size = 1;
  std::string config_yaml;  // the resolved config (to_yaml)
  std::string tokenizer_type;   // "char", "byte", "bpe", "sentencepiece" or "none"
  std::string tokenizer_vocab;  // char: the vocabulary's characters in id order (UTF-8)
  std::string tokenizer_file;   // bpe, sentencepiece: the tokenizer file's bytes
  std::vector<std::pair<std::string, Tensor>> model;  // parameters in module order, f32
  CheckpointOptimizer optimizer;
  std::string rng_state;
  DataState data;
};

/// Writes `ckpt` to `path` atomically: to `<path>.tmp`, flushed and closed, then renamed over
/// `path`. On any failure the temporary file is removed, an existing `path` is left as it was,
/// and lat::Error is thrown naming the file. Model and optimizer tensors must be f32 (any
/// device; copied to the host); names must be non-empty, without '/', unique; strings must
/// not contain NUL characters.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);

/// The parts of a checkpoint load_checkpoint reads.
enum class CheckpointParts {
  all,           // everything, for resuming a run
  weights_only,  // root attributes, /config, /tokenizer and /model, for inference, export and
                 // fine-tuning: /optimizer, /rng and /data are never opened (and stay empty)
  tokenizer_only,  // root attributes, /config and /tokenizer (`lat tokenizer`): no tensor is read
};

/// Reads a checkpoint (tensors on the CPU, in the saved order). Throws lat::Error naming the
/// file when it is missing, not a regular file (a FIFO, a device, a directory), not HDF5
/// (another format or truncated), damaged where HDF5 checks its metadata, not a lat checkpoint
/// (format attribute), from a newer layout version ("checkpoint version 3 is newer than this
/// lat supports (2)") or missing a required part; a /tokenizer type other than char, byte,
/// bpe, sentencepiece or none, a char vocabulary that Tokenizer::char_from_vocab refuses
/// (empty, not UTF-8, a character twice), a /tokenizer/file that is not a 1-D uint8 dataset,
/// is larger than its type's reader accepts (max_tokenizer_file_bytes, checked before reading)
/// or that reader refuses; naming the attribute when step, tokens_seen, the optimizer's step or a
/// /data counter is negative or world_size below 1; naming the dataset when its header fails
/// checked_dataset_extent (data/hdf5_dataset.h: a count that overflows, more data than the file
/// holds, data never or partly written), its crc32 is missing (version >= 2) or does not match
/// its data, or a tensor element is inf or NaN ("/model/<name>: element <i> is inf; the
/// checkpoint holds a diverged or damaged model"). Fixed-length strings of any padding read as
/// completely as variable-length ones. Never modifies the file.
Checkpoint load_checkpoint(const std::string& path, CheckpointParts parts = CheckpointParts::all);

/// The ISO 8601 UTC time now, e.g. "2025-01-31T12:00:00Z".
std::string iso8601_now();

}  // namespace lat
