// A corpus as one stream of token ids, split by position into train and val.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/documents.h"
#include "data/token_cache.h"
#include "data/tokenizer.h"

namespace lat {

/// The largest vocabulary: 2^24 ids. model.vocab_size and data.mqar.vocab are held to it (the
/// config schema), and so are token ids when the vocabulary is taken from the data, and a
/// vocabulary read from a file (a stored config, a safetensors header), before anything is
/// sized by it. Defined with the data because data/ reads token ids and cannot see the schema.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

/// The largest vocabulary taken from the data (model.vocab_size: 0): 2^20 ids, above every
/// published tokenizer (about 256K at most). A larger id in a token file is far more often a
/// wrong data.bin_dtype or a file that is not token ids, whose "vocabulary" would size a
/// multi-GB embedding; a real larger vocabulary is set as model.vocab_size (up to kMaxVocabSize).
inline constexpr int64_t kMaxDataVocabSize = int64_t{1} << 20;

/// The data.* config keys (DESIGN.md), with their defaults.
struct DataOptions {
  std::string path;                   ///< data.path
  std::string format = "auto";        ///< auto, text, bin, h5
  std::string tokenizer = "char";     ///< char, byte or a tokenizer file's path (text only)
  std::string bin_dtype = "uint16";   ///< uint16 or uint32 (raw .bin without llm.c header)
  std::string h5_dataset = "tokens";  ///< dataset name inside an .h5 file
  int64_t block_size = 256;           ///< tokens per training window (inputs)
  double val_fraction = 0.1;          ///< the last fraction of the tokens is the val split
  DocSeparator doc_separator{};       ///< data.doc_separator: what ends a document (none by default)
  bool packing = false;               ///< data.packing: cut windows into documents (needs doc_separator)
  int64_t vocab_size = 0;             ///< > 0: every id must be below it (model.vocab_size)
};

enum class Split { train, val };

/// "train" or "val".
const char* split_name(Split split);

/// Token ids in memory (int32), split by position: train = tokens[0, n_train), val =
/// tokens[n_train, n) with n_train = floor(n * (1 - val_fraction)), as nanoGPT's
/// prepare.py does (int(n * 0.9) for the default).
class Dataset {
 public:
  /// Throws lat::Error when val_fraction is outside (0, 1), block_size < 1, or a split
  /// has fewer than block_size + 1 tokens (one window of inputs plus its last target).
  Dataset(std::vector<int32_t> tokens, double val_fraction, int64_t block_size);
  /// The same split, with documents packed (data.packing): each occurrence of `separator`
  /// (token ids) ends a document, and windows are cut into sequences where documents start
  /// (BatchLoader, SequentialEval). Throws as above, or lat::Error naming data.doc_separator
  /// when `separator` is empty.
  Dataset(std::vector<int32_t> tokens, double val_fraction, int64_t block_size, const std::vector<int32_t>& separator);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t block_size() const { return block_size_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  /// First token of `split` in tokens() and its length.
  int64_t split_begin(Split split) const { return split == Split::train ? 0 : n_train_; }
  int64_t split_size(Split split) const { return split == Split::train ? n_train_ : size() - n_train_; }
  const int32_t* split_data(Split split) const { return tokens_.data() + split_begin(split); }
  /// Where documents start when packing; nullopt otherwise.
  const std::optional<DocumentIndex>& documents() const { return documents_; }
  /// How many tokens of `split` are targets: each but the first, less (packed) each first
  /// token of a document, whose previous token has no target (kIgnoreIndex).
  int64_t num_targets(Split split) const;
  /// The largest id (for a vocab_size taken from the data).
  int32_t max_id() const;
  /// Throws lat::Error naming the first id >= vocab_size, its offset in the stream and `source`.
  void check_ids(int64_t vocab_size, const std::string& source) const;

 private:
  std::vector<int32_t> tokens_;
  int64_t n_train_ = 0;
  int64_t block_size_ = 0;
  std::optional<DocumentIndex> documents_;
};

/// Throws lat::Error naming the first id >= vocab_size, its offset in `tokens` and `source`.
void check_token_ids(const std::vector<int32_t>& tokens, int64_t vocab_size, const std::string& source);

/// A loaded corpus: the dataset, the tokenizer of a text corpus (none for bin/h5), the
/// format actually read, and for text loaded with a cache directory what the token cache did.
struct LoadedData {
  Dataset dataset;
  std::optional<Tokenizer> tokenizer;
  std::string format;
  std::optional<TokenCacheLookup> token_cache;
};

/// "text", "bin" or "h5" by the extension of `path` (.txt, .bin, .h5/.hdf5); "" for another
/// extension. Reads nothing.
std::string format_by_extension(const std::string& path);

/// "text", "bin" or "h5" for `path` when `format` is "auto": by extension (.txt, .bin,
/// .h5/.hdf5), else by content (HDF5 signature, llm.c magic), else text. Otherwise checks
/// and returns `format`. Throws lat::Error naming data.format for an unknown format.
std::string resolve_format(const std::string& path, const std::string& format);

/// Reads options.path. A text corpus is encoded with `tokenizer` when given (a resumed
/// run's saved vocabulary, a tokenizer read from a file), else with a new tokenizer of type
/// options.tokenizer (char or byte) built from the whole text; on get_num_threads() threads
/// where the tokenizer allows (parallel_encode.h). With a `token_cache_dir` the ids are read
/// from its token cache when one for this text and tokenizer is whole there (token_cache.h),
/// and the result's token_cache says so or where the caller is to write it. When options.vocab_size > 0 every id is checked below it; when it is 0
/// (the vocabulary taken from the data), every bin or h5 id below kMaxDataVocabSize. With
/// options.packing the dataset is packed at options.doc_separator (encoded with the
/// tokenizer for text). Throws lat::Error naming the path (missing file, bad content) or the
/// key at fault: data.doc_separator of the wrong kind for the format (a string for bin or h5,
/// an int for text) or one that separates no two documents of the file, data.packing
/// without data.doc_separator; and, packed, the path and the split that has no targets (each
/// of its tokens after the first is the separator).
LoadedData load_data(const DataOptions& options, const std::optional<Tokenizer>& tokenizer = std::nullopt,
                     const std::string& token_cache_dir = "");

}  // namespace lat
