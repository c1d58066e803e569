// `lat tokenizer encode --tokenizer SPEC [--text TEXT | FILE]`,
// `lat tokenizer decode --tokenizer SPEC IDS...` and
// `lat tokenizer train --vocab-size N --out DIR [--model-type bpe|unigram] TEXT_FILE...`
// (DESIGN.md, "Tokenizers").
#include <charconv>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "data/dataset.h"
#include "lat/error.h"
#include "train/cli/command.h"
#include "train/config/config_types.h"
#include "train/config/thread_count.h"
#include "train/inference/tokenizer_source.h"
#include "train/inference/tokenizer_train.h"

namespace lat::cli {

namespace {

constexpr const char* kTokenizerHelp =
    "char (with --data FILE), byte, a tokenizer.json, a SentencePiece .model, a checkpoint (.h5), a run or an "
    "export directory";

/// What both subcommands take: the tokenizer and, for char, its text.
struct TokenizerArgs {
  std::string spec, data;
};

void add_tokenizer_options(CLI::App& sub, TokenizerArgs& args) {
  sub.add_option("--tokenizer", args.spec, kTokenizerHelp)->required();
  sub.add_option("--data", args.data, "the text whose characters are the char vocabulary (as lat train builds it)");
}

/// The ids of `words` (decimal int64 each, in [0, vocab_size)). Throws ConfigError naming the
/// first word that is not one.
std::vector<int64_t> parse_ids(const std::vector<std::string>& words, const Tokenizer& tokenizer) {
  std::vector<int64_t> ids;
  ids.reserve(words.size());
  for (const std::string& word : words) {
    int64_t id = 0;
    const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (error != std::errc() || end != word.data() + word.size() || word.empty())
      throw ConfigError("lat tokenizer decode: id '" + word + "' is not an integer");
    if (id < 0 || id >= tokenizer.vocab_size())
      throw ConfigError("lat tokenizer decode: id " + word + " is outside the vocabulary of the " + tokenizer.type() +
                        " tokenizer (" + std::to_string(tokenizer.vocab_size()) + " tokens: ids 0.." +
                        std::to_string(tokenizer.vocab_size() - 1) + ")");
    ids.push_back(id);
  }
  return ids;
}

/// Prints the ids of `text_option`, else of the file `file`, else of standard input.
int run_encode(const TokenizerArgs& args, const std::optional<std::string>& text_option, const std::string& file) {
  const Tokenizer tokenizer = load_tokenizer_source(args.spec, args.data);
  std::string text;
  if (text_option) {
    text = *text_option;
  } else if (!file.empty()) {
    text = read_tokenizer_text_file(file, "the text file");
  } else {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::vector<int64_t> ids;
  try {
    ids = tokenizer.encode(text);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    // The text is the user's input: a character outside the vocabulary is a usage error.
    throw ConfigError(std::string("lat tokenizer encode: ") + e.what());
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::cout << line << "\n";
  return 0;
}

}  // namespace

Command add_tokenizer_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("tokenizer", "Encode text to token ids and decode ids to text");
  sub->require_subcommand(1);

  auto encode_args = std::make_shared<TokenizerArgs>();
  auto text = std::make_shared<std::string>();
  auto file = std::make_shared<std::string>();
  CLI::App* encode = sub->add_subcommand("encode", "Print the ids of a text, space-separated, on one line");
  add_tokenizer_options(*encode, *encode_args);
  CLI::Option* text_option = encode->add_option("--text", *text, "the text (else FILE, else standard input)");
  encode->add_option("file", *file, "a file holding the text")->excludes(text_option);

  auto decode_args = std::make_shared<TokenizerArgs>();
  auto words = std::make_shared<std::vector<std::string>>();
  CLI::App* decode = sub->add_subcommand("decode", "Print the text of ids, exactly (no newline added)");
  add_tokenizer_options(*decode, *decode_args);
  // Strings, not ints: a bad id is named by the message of parse_ids, with the vocabulary size.
  decode->add_option("ids", *words, "token ids")->required()->allow_extra_args();

  auto train_options = std::make_shared<TokenizerTrainOptions>();
  auto train_threads = std::make_shared<int>(0);
  CLI::App* train = sub->add_subcommand("train", "Train a SentencePiece tokenizer on text files into a new directory");
  train->add_option("--vocab-size", train_options->vocab_size, "the vocabulary size (exactly)")
      ->required()
      ->check(int_in(1, kMaxVocabSize));
  train->add_option("--out", train_options->out_dir, "the directory to write (new or empty)")->required();
  train->add_option("--model-type", train_options->model_type, "bpe (default) or unigram");
  train->add_option("--threads", *train_threads, "threads (default: OMP_NUM_THREADS, else all cores)")
      ->check(int_in(1, kMaxThreads));
  train->add_option("text_files", train_options->text_files, "UTF-8 text files")->required();

  return {sub, [=] {
            if (train->parsed()) {
              TokenizerTrainOptions options = *train_options;
              options.threads = inference_threads(*train_threads);
              train_tokenizer(options);
              std::cout << "wrote " << (std::filesystem::path(options.out_dir) / "tokenizer.model").string() << " ("
                        << options.model_type << ", " << options.vocab_size << " pieces)\n";
              return 0;
            }
            if (encode->parsed())
              return run_encode(*encode_args, text_option->count() ? std::optional(*text) : std::nullopt, *file);
            const Tokenizer tokenizer = load_tokenizer_source(decode_args->spec, decode_args->data);
            std::cout << tokenizer.decode(parse_ids(*words, tokenizer));
            return 0;
          }};
}

}  // namespace lat::cli
