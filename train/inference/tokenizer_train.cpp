// Training a SentencePiece tokenizer with libsentencepiece's trainer (tokenizer_train.h).
#include "train/inference/tokenizer_train.h"

#include <nlohmann/json.hpp>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <unordered_map>

#include "data/regular_file.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/utf8.h"
#include "lat/error.h"
#include "train/config/config_types.h"
#include "train/files/atomic_file.h"
#include "train/files/hf_tokenizer.h"

namespace lat {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWho = "lat tokenizer train";

/// The largest text file read (the trainer keeps every line in memory as well).
constexpr size_t kMaxTextFileBytes = size_t{1} << 34;

/// A text to train on: its path (for messages) and its bytes.
struct TrainingText {
  std::string path, bytes;
};

/// The lines of `texts` (without their '\n'), one after another, as sentencepiece's trainer
/// reads sentences (a newline is no piece: it is encoded by byte fallback), then a line " "
/// when no text holds a space. sentencepiece writes a space as "▁" before encoding; were "▁"
/// no piece, a space would fall back to the bytes of "▁" and decode as "▁", not " ".
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<TrainingText>& texts)
      : texts_(texts), space_line_pending_(std::none_of(texts.begin(), texts.end(), [](const TrainingText& text) {
          return text.bytes.find(' ') != std::string::npos;
        })) {
    load_line();
  }

  bool done() const override { return text_ >= texts_.size() && !space_line_pending_; }
  void Next() override {
    if (text_ >= texts_.size()) {
      space_line_pending_ = false;
      return;
    }
    pos_ = end_ + 1;
    load_line();
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  /// Moves to the next line at or after pos_, into line_ (done() when there is none).
  void load_line() {
    while (text_ < texts_.size() && pos_ >= texts_[text_].bytes.size()) {
      ++text_;
      pos_ = 0;
    }
    if (text_ >= texts_.size()) {
      line_.assign(1, ' ');
      return;
    }
    const std::string& bytes = texts_[text_].bytes;
    end_ = std::min(bytes.find('\n', pos_), bytes.size());
    line_.assign(bytes, pos_, end_ - pos_);
  }

  const std::vector<TrainingText>& texts_;
  bool space_line_pending_;
  size_t text_ = 0, pos_ = 0, end_ = 0;
  std::string line_;
};

/// Each file's bytes, refused when unreadable, empty or not UTF-8.
std::vector<TrainingText> read_texts(const std::vector<std::string>& paths) {
  std::vector<TrainingText> texts;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw Error(std::string(kWho) + ": '" + path + "': no such file");
    TrainingText text{path, read_bounded_file(path, kMaxTextFileBytes, "text to train a tokenizer on")};
    if (text.bytes.find_first_not_of('\n') == std::string::npos)
      throw Error(std::string(kWho) + ": '" + path + "' is empty" + (text.bytes.empty() ? "" : " but for line breaks") +
                  ", expected text");
    check_utf8(text.bytes, (std::string(kWho) + ": '" + path + "'").c_str());
    texts.push_back(std::move(text));
  }
  return texts;
}

/// `out_dir` absolute, normalized, without a trailing '/' ("tok/" names the directory tok).
fs::path absolute_out_dir(const std::string& out_dir) {
  const fs::path out = fs::absolute(out_dir).lexically_normal();
  return out.has_filename() ? out : out.parent_path();
}

/// Refuses an --out that exists and is not an empty directory (nothing is ever overwritten).
void check_out_dir(const std::string& out_dir) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(out_dir, ec);
  if (!fs::exists(status)) {
    const fs::path parent = absolute_out_dir(out_dir).parent_path();
    if (!fs::is_directory(parent, ec))
      throw ConfigError(std::string(kWho) + ": --out '" + out_dir + "': no directory '" + parent.string() +
                        "' to create it in");
    return;
  }
  if (!fs::is_directory(status))
    throw ConfigError(std::string(kWho) + ": --out '" + out_dir + "' exists and is not a directory");
  if (!fs::is_empty(out_dir, ec))
    throw ConfigError(std::string(kWho) + ": --out '" + out_dir +
                      "' is a directory that is not empty (give a new or empty directory; nothing is overwritten)");
}

/// The trainer's options: byte fallback and character_coverage 1 make every character
/// encodable (those never seen as their UTF-8 bytes); the identity rule, no dummy prefix and
/// no whitespace clean-up keep the text as it is, so that decode(encode(text)) == text.
std::unordered_map<std::string, std::string> trainer_options(const TokenizerTrainOptions& options) {
  return {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1"},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", std::to_string(kMaxTrainingLineBytes)},
      {"hard_vocab_limit", "true"},
      {"num_threads", std::to_string(options.threads)},
      // Progress lines are sentencepiece's, not lat's: only its errors are shown.
      {"minloglevel", "2"},
  };
}

/// The digits that follow the first `marker` in `message` ("" when there are none).
std::string number_after(const std::string& message, const std::string& marker) {
  const size_t at = message.find(marker);
  if (at == std::string::npos) return "";
  const size_t begin = at + marker.size();
  return message.substr(begin, message.find_first_not_of("0123456789", begin) - begin);
}

/// `message` (sentencepiece's refusal) in terms of --vocab-size where it is about the size.
/// sentencepiece says "Vocabulary size is smaller than required_chars. <N> vs <needed>." and,
/// for unigram, "Vocabulary size too high (<N>). Please set it to a value <= <most>.".
[[noreturn]] void refuse_training(const std::string& message, int64_t vocab_size) {
  const std::string flag = std::string(kWho) + ": --vocab-size " + std::to_string(vocab_size);
  if (message.find("smaller than required_chars") != std::string::npos) {
    const std::string needed = number_after(message, " vs ");
    if (!needed.empty())
      throw ConfigError(flag + " is too small: the text needs at least " + needed +
                        " (a piece per character, 256 byte pieces, <unk>, <s> and </s>)");
  }
  if (message.find("Vocabulary size too high") != std::string::npos) {
    const std::string most = number_after(message, "<= ");
    if (!most.empty()) throw ConfigError(flag + " is too large: the text gives at most " + most + " pieces");
  }
  throw Error(std::string(kWho) + ": sentencepiece refused to train: " + message);
}

/// A new empty directory beside `out_dir` that rename() can move onto it.
fs::path make_staging_dir(const std::string& out_dir) {
  const fs::path out = absolute_out_dir(out_dir);
  const fs::path parent = out.parent_path();
  const std::string name = out.filename().string();
  std::random_device entropy;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const fs::path staging = parent / ("." + name + ".tmp-" + std::to_string(entropy()));
    std::error_code ec;
    if (fs::create_directory(staging, ec)) return staging;
    if (ec) throw Error(std::string(kWho) + ": cannot create '" + staging.string() + "': " + ec.message());
  }
  throw Error(std::string(kWho) + ": cannot create a temporary directory in '" + parent.string() + "'");
}

}  // namespace

void train_tokenizer(const TokenizerTrainOptions& options) {
  if (std::find(kTrainableModelTypes.begin(), kTrainableModelTypes.end(), options.model_type) ==
      kTrainableModelTypes.end())
    throw ConfigError(std::string(kWho) + ": --model-type '" + options.model_type + "': expected bpe or unigram");
  LAT_CHECK(options.vocab_size > 0 && options.threads > 0, kWho << ": vocab_size and threads must be positive");
  check_out_dir(options.out_dir);
  const std::vector<TrainingText> texts = read_texts(options.text_files);

  // Made before training, so that an --out whose parent cannot take it fails at once.
  const fs::path staging = make_staging_dir(options.out_dir);
  try {
    LineIterator lines(texts);
    std::string model;
    const sentencepiece::util::Status status =
        sentencepiece::SentencePieceTrainer::Train(trainer_options(options), &lines, &model);
    if (!status.ok()) refuse_training(status.ToString(), options.vocab_size);
    const int64_t pieces = sentencepiece_model(model, "the trained model")->vocab_size();
    if (pieces != options.vocab_size)
      throw ConfigError(std::string(kWho) + ": --vocab-size " + std::to_string(options.vocab_size) +
                        " is too large: the text gives at most " + std::to_string(pieces) + " pieces");
    write_text_atomically((staging / "tokenizer.model").string(), model, kWho);
    // transformers has no class that runs a unigram .model as sentencepiece does (its
    // conversion adds a "▁" prefix, splits at whitespace and appends </s>): no config then.
    if (options.model_type == "bpe")
      write_text_atomically((staging / "tokenizer_config.json").string(),
                            sentencepiece_llama_tokenizer_config().dump(2) + "\n", kWho);
    std::error_code ec;
    fs::rename(staging, options.out_dir, ec);
    if (ec)
      throw Error(std::string(kWho) + ": cannot rename '" + staging.string() + "' to '" + options.out_dir +
                  "': " + ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
}

}  // namespace lat
