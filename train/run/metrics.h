// metrics.jsonl (DESIGN.md, "The command line and the files a run writes"): one JSON object
// per line, appended and flushed record by record, keys in the documented order.
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

namespace lat {

/// A training log record: {"step", "loss", "lr", "grad_norm", "tokens_seen", "tokens_per_s", "time_s"}.
struct LogRecord {
  int64_t step = 0;         // completed optimizer steps
  double loss = 0.0;        // token-weighted mean training loss of this step
  double lr = 0.0;          // learning rate of this step
  double grad_norm = 0.0;   // global norm before clipping (null in JSON when not finite)
  int64_t tokens_seen = 0;  // training targets so far, over the whole run (resumes included)
  double tokens_per_s = 0;  // input tokens (batch_size x grad_accum x block_size per step, targets
                            // or not) per second over the training steps since the previous log
                            // record (evals and checkpoint writes excluded)
  double time_s = 0;        // wall time since this process started its first step (evals included)
};

/// Which val tokens an eval's loss is over: `eval_batches` batches (the periodic evals), or the
/// whole val split (a text run's final eval), a different measurement not to be joined to them.
enum class ValScope { batches, whole_split };

/// Appends records to a metrics.jsonl file.
class MetricsWriter {
 public:
  /// Opens `path` for appending (creating it). Throws lat::Error naming it when it cannot.
  explicit MetricsWriter(const std::string& path);

  void log(const LogRecord& r);
  /// {"step", "val_loss", "val_bpc"}, val_bpc = val_loss / ln 2 (bits per token: per
  /// character for the char tokenizer); ValScope::whole_split adds "whole_split": true, and
  /// `bits_per_byte` (a subword tokenizer's whole split) adds "val_bpb".
  void eval(int64_t step, double val_loss, ValScope scope = ValScope::batches,
            std::optional<double> bits_per_byte = std::nullopt);

 private:
  void write_line(const std::string& line);

  std::string path_;
  std::ofstream out_;
};

}  // namespace lat
