// `lat tokenizer train`: a SentencePiece tokenizer trained on the user's text by
// libsentencepiece's own trainer (DESIGN.md, "Tokenizers"), with options under which
// decode(encode(text)) == text for any UTF-8 text (byte fallback for characters never seen,
// no normalization, no added prefix space), written as a directory that lat
// (`data.tokenizer`, `--tokenizer`) and transformers' AutoTokenizer both load.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lat {

/// The SentencePiece model types `lat tokenizer train --model-type` takes.
inline const std::vector<std::string> kTrainableModelTypes = {"bpe", "unigram"};

/// The longest line (bytes) the trainer learns from; longer lines are left out of training
/// (they are still encoded exactly, like any text).
inline constexpr int64_t kMaxTrainingLineBytes = int64_t{1} << 20;

/// What `lat tokenizer train` trains.
struct TokenizerTrainOptions {
  std::vector<std::string> text_files;  ///< UTF-8 text, one training sentence per line
  int64_t vocab_size = 0;               ///< exact size of the vocabulary written
  std::string model_type = "bpe";       ///< one of kTrainableModelTypes
  std::string out_dir;                  ///< must not exist, or be an empty directory
  int threads = 1;                      ///< sentencepiece's num_threads
};

/// Trains a SentencePiece model on `options.text_files` and writes `options.out_dir` holding
/// tokenizer.model and, for bpe, tokenizer_config.json (transformers' LlamaTokenizer, no
/// BOS/EOS added, no prefix space, "<s>" in a text read as characters). Everything is written into a sibling temporary directory that is
/// renamed to out_dir at the end, so a failure leaves no out_dir behind. Throws ConfigError
/// (usage) for a model type outside kTrainableModelTypes, an out_dir that exists and is not an
/// empty directory, or a vocab_size the text cannot give (too small for the characters it
/// holds, or more pieces than it yields); lat::Error naming the file for one that is missing,
/// unreadable, empty or not UTF-8 (with the byte offset), and for a failed write.
void train_tokenizer(const TokenizerTrainOptions& options);

}  // namespace lat
