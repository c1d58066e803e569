// Synthetic recall tasks as a data source (data.task): multi-query associative recall (MQAR)
// and copying. Each sequence is generated from one 64-bit key (BatchLoader derives it from
// (seed, split, step, micro-batch, row)), so there are no files, a resumed run draws exactly
// the sequences of an uninterrupted one, and N ranks share the rows of one global batch.
// Only answers are targets: every other target is kIgnoreIndex, so the loss and the
// accuracy count answer tokens alone.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lat {

/// data.mqar.*: Arora et al. 2023, "Zoology: Measuring and improving recall in efficient
/// language models", sec. 3 (MQAR), as its reference generator defines it.
struct MqarOptions {
  int64_t vocab = 8192;               ///< ids [1, vocab/2) are keys, [vocab/2, vocab) values
  std::vector<int64_t> pairs = {16};  ///< key-value pairs; several = a mix, one drawn per sequence
  double alpha = 0.01;                ///< query gaps: P(gap = g) ~ (g + 1)^(alpha - 1); 1 = uniform
  bool operator==(const MqarOptions&) const = default;
};

/// data.copy.*: the copy task of Jelassi et al. 2024, "Repeat After Me: Transformers are
/// Better than State Space Models at Copying".
struct CopyOptions {
  int64_t length = 64;  ///< tokens of the string to copy
  bool operator==(const CopyOptions&) const = default;
};

/// The copy task's ids: padding, the separator between the string and its copy, then an
/// alphabet of 26 symbols (Jelassi et al. sample strings over 26 letters).
constexpr int64_t kCopyPadding = 0;
constexpr int64_t kCopySeparator = 1;
constexpr int64_t kCopyAlphabet = 26;
constexpr int64_t kCopyVocab = 2 + kCopyAlphabet;

/// The most key-value pairs an MQAR sequence of `seq_len` tokens over `vocab` ids holds:
/// 4 * pairs <= seq_len (2 * pairs tokens of pairs, then one query slot of two tokens per
/// key among the remaining (seq_len - 2 * pairs) / 2; Zoology asserts the same) and
/// pairs <= vocab / 2 - 1 (distinct keys from [1, vocab/2)). 0 when none fits.
int64_t mqar_max_pairs(int64_t vocab, int64_t seq_len);

/// The longest copy string a sequence of `seq_len` tokens holds: seq_len / 2 (string,
/// separator and copy take 2 * length + 1 tokens, the last of which is only a target).
int64_t copy_max_length(int64_t seq_len);

/// One synthetic task at one sequence length.
///
/// MQAR (T = seq_len, N pairs drawn from the mix, V = vocab, C = 2N): N distinct keys from
/// [1, V/2) and N distinct values from [V/2, V); inputs[0, C) = k1 v1 k2 v2 ... kN vN. The
/// rest holds (T - C) / 2 query slots of two tokens; key j is queried once, at position
/// C + 2 * gap_j, the gaps N distinct slots drawn one after another (successive sampling
/// without replacement) with weights (gap + 1)^(alpha - 1), which favours short distances
/// as repeated bigrams do in text. As in Zoology, the target at a query's own position is
/// its value (the value is never an input there), and every other input is filler drawn
/// uniformly from [0, V) with an ignored target.
///
/// Copy (L = length): the sequence s_1 .. s_L, separator, s_1 .. s_L, padding (s drawn
/// uniformly from the alphabet) shifted by one as everywhere: inputs are its first T tokens,
/// and the targets at positions L .. 2L-1 (the separator and the copy but its last token) are
/// s_1 .. s_L; all others are ignored.
class SyntheticTask {
 public:
  /// Throws lat::Error naming the option when vocab < 4, pairs is empty or an entry is
  /// outside [1, mqar_max_pairs(vocab, seq_len)], alpha <= 0 or is not finite, or seq_len < 1.
  static SyntheticTask mqar(const MqarOptions& options, int64_t seq_len);
  /// Throws lat::Error when length is outside [1, copy_max_length(seq_len)].
  static SyntheticTask copy(const CopyOptions& options, int64_t seq_len);
  /// mqar() or copy() by name ("mqar", "copy"); throws lat::Error naming any other.
  static SyntheticTask named(const std::string& task, const MqarOptions& mqar, const CopyOptions& copy,
                             int64_t seq_len);

  const std::string& name() const { return name_; }
  int64_t seq_len() const { return seq_len_; }
  /// Every id is below this: mqar.vocab, or kCopyVocab.
  int64_t vocab_size() const;
  const MqarOptions& mqar_options() const { return mqar_; }
  const CopyOptions& copy_options() const { return copy_; }
  /// For logs: "mqar (pairs 4,8,16; vocab 8192; alpha 0.01)" or "copy (length 64)".
  std::string describe() const;
  /// The sampling rule's name and version ("splitmix64-mqar-v1"), saved in a checkpoint's
  /// /data so that a resume under a different rule is detected.
  std::string sampler() const;

  /// Writes the sequence of `key` to inputs[0, T) and targets[0, T) (T = seq_len) and
  /// returns its number of answers (targets that are not kIgnoreIndex).
  int64_t sample(uint64_t key, int64_t* inputs, int64_t* targets) const;

 private:
  SyntheticTask(std::string name, int64_t seq_len) : name_(std::move(name)), seq_len_(seq_len) {}
  int64_t sample_mqar(uint64_t key, int64_t* inputs, int64_t* targets) const;
  int64_t sample_copy(uint64_t key, int64_t* inputs, int64_t* targets) const;

  std::string name_;
  int64_t seq_len_ = 0;
  MqarOptions mqar_;
  CopyOptions copy_;
  // Per entry of mqar_.pairs: the weights (g + 1)^(alpha - 1) of its query slots g.
  std::vector<std::vector<double>> gap_weights_;
};

}  // namespace lat
