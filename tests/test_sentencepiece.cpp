// SentencePiece tokenizers: `lat tokenizer train` (train/inference/tokenizer_train.h) writes a
// model of exactly the vocabulary size asked for, whose ids are libsentencepiece's own and
// whose decode(encode(text)) == text for any UTF-8 text (byte fallback for characters never
// seen); its refusals; and a damaged .model refused in one line (data/sentencepiece_tokenizer.h).
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer.h"
#include "tests/expect_error.h"
#include "tests/lat_command.h"
#include "tests/test_files.h"
#include "train/config/config_types.h"
#include "train/files/tokenizer_files.h"
#include "train/inference/tokenizer_train.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

// Accents, CJK, emoji (one a ZWJ sequence), runs of spaces and tabs, blank lines, CR LF, digits.
const std::string kMultilingual =
    "Café naïve façade, déjà vu; Größe Straße.\n"
    "中文文本：我们在这里测试。日本語のテキスト。한국어 문장.\n"
    "Emoji 🙂🚀👩‍👩‍👧, math ∑∫√, arrows → ⇒.\n"
    "Runs of   spaces,\t\ttabs,\n\n\nand CR LF\r\n"
    "Digits 0123456789 3.14159 1,000,000; Ελληνικά, русский, עברית.\n"
    "  leading and trailing spaces   \n";

// Characters no training text below holds: each is encoded as its UTF-8 bytes.
const std::string kUnseen = "☃ 𝔘 ሰላም ✓ 🦀 \x01\x7f";

/// About 30 KB of English-like text, the same every time: lines of 6 to 13 words, each word
/// one of a fixed list or (one in three) 2 to 4 syllables of another, in a pseudo-random order.
std::string english_text() {
  const std::vector<std::string> words = {"the",   "king",  "and",    "queen", "of",    "this",  "land",
                                          "shall", "speak", "before", "we",    "go",    "to",    "war",
                                          "with",  "my",    "lord",   "good",  "night", "sweet", "prince"};
  const std::vector<std::string> syllables = {"ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de", "gu", "ven", "dor"};
  uint64_t state = 42;
  const auto next = [&state](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;  // Knuth's MMIX LCG
    return (state >> 33) % n;
  };
  std::string text;
  for (int line = 0; line < 600; ++line) {
    const uint64_t n = 6 + next(8);
    for (uint64_t w = 0; w < n; ++w) {
      if (w) text += ' ';
      if (next(3) == 0) {
        for (uint64_t k = 2 + next(3); k > 0; --k) text += syllables[next(syllables.size())];
      } else {
        text += words[next(words.size())];
      }
    }
    text += line % 5 == 4 ? ".\n\n" : ",\n";
  }
  return text;
}

class SentencePieceTest : public TempDirTest {
 protected:
  /// Trains `model_type` with `vocab_size` pieces on the files `texts` into dir_/`out`.
  void train(const std::vector<std::string>& texts, int64_t vocab_size, const std::string& out,
             const std::string& model_type = "bpe") const {
    lat::TokenizerTrainOptions options;
    options.text_files = texts;
    options.vocab_size = vocab_size;
    options.model_type = model_type;
    options.out_dir = path(out);
    options.threads = 2;
    lat::train_tokenizer(options);
  }

  /// The tokenizer lat reads from dir_/`out` (the directory, as data.tokenizer and --tokenizer
  /// take it).
  lat::Tokenizer read(const std::string& out) const {
    const std::optional<lat::Tokenizer> tokenizer = lat::read_tokenizer_file(path(out), "test");
    EXPECT_TRUE(tokenizer.has_value());
    return *tokenizer;
  }

  /// Expects ids of `text` through lat equal to libsentencepiece's SentencePieceProcessor on
  /// the written model, and decode(encode(text)) == text.
  void expect_sentencepiece_ids_and_round_trip(const std::string& out, const std::string& text) const {
    sentencepiece::SentencePieceProcessor processor;
    ASSERT_TRUE(processor.Load((dir_ / out / "tokenizer.model").string()).ok());
    std::vector<int> expected;
    ASSERT_TRUE(processor.Encode(text, &expected).ok());
    const lat::Tokenizer tokenizer = read(out);
    const std::vector<int64_t> ids = tokenizer.encode(text);
    EXPECT_EQ(ids, std::vector<int64_t>(expected.begin(), expected.end())) << out;
    EXPECT_EQ(tokenizer.decode(ids), text) << out;
  }
};

TEST_F(SentencePieceTest, KnownIdsOfATinyModel) {
  // Characters a and ▁ (one line " " is trained on as the text holds no space), 256 bytes,
  // <unk> <s> </s>: 261 pieces; the 262nd is the one merge "aa".
  train({write("a.txt", "aaaa\naaaa\n")}, 262, "tok");
  const lat::Tokenizer tokenizer = read("tok");
  EXPECT_EQ(tokenizer.vocab_size(), 262);
  EXPECT_EQ(tokenizer.encode("aaaaa"), (std::vector<int64_t>{259, 259, 260}));
  EXPECT_EQ(tokenizer.encode("a a"), (std::vector<int64_t>{260, 261, 260}));
  // Byte fallback: byte b is id 3 + b; 中 is E4 B8 AD, a newline 0A.
  EXPECT_EQ(tokenizer.encode("中\n"), (std::vector<int64_t>{3 + 0xE4, 3 + 0xB8, 3 + 0xAD, 3 + 0x0A}));
  EXPECT_EQ(tokenizer.decode({260, 261, 3 + 0xE4, 3 + 0xB8, 3 + 0xAD}), "a 中");
}

TEST_F(SentencePieceTest, WritesTheVocabularySizeAskedFor) {
  const std::string text = write("english.txt", english_text());
  const std::string multilingual = write("multilingual.txt", kMultilingual);
  for (const auto& [model_type, size] : std::vector<std::pair<std::string, int64_t>>{
           {"bpe", 500}, {"bpe", 437}, {"unigram", 450}}) {
    const std::string out = model_type + std::to_string(size);
    train({text, multilingual}, size, out, model_type);
    sentencepiece::SentencePieceProcessor processor;
    ASSERT_TRUE(processor.Load((dir_ / out / "tokenizer.model").string()).ok());
    EXPECT_EQ(processor.GetPieceSize(), size) << out;
    EXPECT_EQ(read(out).vocab_size(), size) << out;
    EXPECT_EQ(fs::exists(dir_ / out / "tokenizer_config.json"), model_type == "bpe") << out;
  }
  const std::string config = read_bytes(dir_ / "bpe500" / "tokenizer_config.json");
  for (const char* part : {"\"tokenizer_class\": \"LlamaTokenizer\"", "\"add_bos_token\": false",
                           "\"add_prefix_space\": false", "\"legacy\": false", "\"split_special_tokens\": true"})
    EXPECT_NE(config.find(part), std::string::npos) << part << " in " << config;
}

TEST_F(SentencePieceTest, IdsAreSentencePiecesAndTextComesBackExactly) {
  const std::string text = write("english.txt", english_text());
  const std::string multilingual = write("multilingual.txt", kMultilingual);
  train({text, multilingual}, 600, "bpe");
  train({text, multilingual}, 500, "unigram", "unigram");
  // Trained on English alone: every non-ASCII character is unseen.
  train({text}, 400, "english");
  for (const char* out : {"bpe", "unigram", "english"}) {
    expect_sentencepiece_ids_and_round_trip(out, kMultilingual);
    expect_sentencepiece_ids_and_round_trip(out, kUnseen);
    expect_sentencepiece_ids_and_round_trip(out, english_text().substr(0, 2000));
    expect_sentencepiece_ids_and_round_trip(out, "  \n\t \r\n   ");
  }
  // Unseen characters are their UTF-8 bytes: ☃ is E2 98 83.
  EXPECT_EQ(read("english").encode("☃"), (std::vector<int64_t>{3 + 0xE2, 3 + 0x98, 3 + 0x83}));
}

TEST_F(SentencePieceTest, BpePiecesAreTheSameAtEveryThreadCount) {
  lat::TokenizerTrainOptions options;
  options.text_files = {write("english.txt", english_text()), write("multilingual.txt", kMultilingual)};
  options.vocab_size = 600;
  std::vector<sentencepiece::SentencePieceProcessor> processors(2);
  for (int threads : {1, 3}) {
    options.threads = threads;
    options.out_dir = path("threads" + std::to_string(threads));
    lat::train_tokenizer(options);
    ASSERT_TRUE(processors[threads / 2].Load(options.out_dir + "/tokenizer.model").ok());
  }
  for (int id = 0; id < 600; ++id) {
    EXPECT_EQ(processors[0].IdToPiece(id), processors[1].IdToPiece(id)) << id;
    EXPECT_EQ(processors[0].GetScore(id), processors[1].GetScore(id)) << id;
  }
}

TEST_F(SentencePieceTest, ASpaceComesBackWhenTheTextHeldNone) {
  train({write("words.txt", "abc\ndef\nabcdef\n")}, 270, "tok");
  EXPECT_EQ(read("tok").decode(read("tok").encode("abc def  x")), "abc def  x");
}

TEST_F(SentencePieceTest, AnEmptyOrNewOutDirectoryIsFilled) {
  fs::create_directory(dir_ / "empty");
  train({write("english.txt", english_text())}, 300, "empty");
  EXPECT_EQ(read("empty").vocab_size(), 300);
  // A trailing '/' names the same directory.
  train({path("english.txt")}, 300, "slash/");
  EXPECT_EQ(read("slash").vocab_size(), 300);
}

TEST_F(SentencePieceTest, RefusesAVocabularySizeTheTextCannotGive) {
  const std::string text = write("a.txt", "aaaa\naaaa\n");
  // The text needs 261 pieces; its lines "aaaa" give 3 merges at most: 264 (trained below).
  expect_error<lat::ConfigError>([&] { train({text}, 260, "tok"); },
                                 {"lat tokenizer train: --vocab-size 260 is too small: the text needs at least 261 "
                                  "(a piece per character, 256 byte pieces, <unk>, <s> and </s>)"});
  expect_error<lat::ConfigError>(
      [&] { train({text}, 300, "tok"); },
      {"lat tokenizer train: --vocab-size 300 is too large: the text gives at most 264 pieces"});
  expect_error<lat::ConfigError>(
      [&] { train({write("english.txt", english_text())}, 5000, "tok", "unigram"); },
      {"lat tokenizer train: --vocab-size 5000 is too large: the text gives at most "});
  EXPECT_FALSE(fs::exists(dir_ / "tok"));
  train({text}, 264, "most");
  EXPECT_EQ(read("most").vocab_size(), 264);
}

TEST_F(SentencePieceTest, RefusesBadTextFiles) {
  const std::string good = write("good.txt", english_text());
  expect_error([&] { train({good, path("missing.txt")}, 300, "tok"); },
               {"lat tokenizer train: '" + path("missing.txt") + "': no such file"});
  expect_error([&] { train({write("empty.txt", "")}, 300, "tok"); },
               {"lat tokenizer train: '" + path("empty.txt") + "' is empty, expected text"});
  expect_error([&] { train({write("breaks.txt", "\n\n\n")}, 300, "tok"); },
               {"lat tokenizer train: '" + path("breaks.txt") + "' is empty but for line breaks, expected text"});
  expect_error([&] { train({write("latin1.txt", "caf\xe9 au lait\n")}, 300, "tok"); },
               {"lat tokenizer train: '" + path("latin1.txt") + "': invalid UTF-8 at byte offset 3"});
  fs::create_directory(dir_ / "folder");
  expect_error([&] { train({path("folder")}, 300, "tok"); },
               {path("folder") + "' (text to train a tokenizer on) is a directory, expected a regular file"});
  EXPECT_FALSE(fs::exists(dir_ / "tok"));
}

TEST_F(SentencePieceTest, RefusesAnOutThatHoldsSomethingAndAnUnknownModelType) {
  const std::string text = write("english.txt", english_text());
  fs::create_directory(dir_ / "full");
  write("full/notes.txt", "keep me");
  expect_error<lat::ConfigError>([&] { train({text}, 300, "full"); },
                                 {"lat tokenizer train: --out '" + path("full") +
                                  "' is a directory that is not empty (give a new or empty directory; nothing is "
                                  "overwritten)"});
  EXPECT_EQ(read_bytes(dir_ / "full" / "notes.txt"), "keep me");
  expect_error<lat::ConfigError>([&] { train({text}, 300, "english.txt"); },
                                 {"lat tokenizer train: --out '" + path("english.txt") +
                                  "' exists and is not a directory"});
  expect_error<lat::ConfigError>([&] { train({text}, 300, "missing/tok"); },
                                 {"lat tokenizer train: --out '" + path("missing/tok") + "': no directory '" +
                                  path("missing") + "' to create it in"});
  expect_error<lat::ConfigError>([&] { train({text}, 300, "tok", "wordpiece"); },
                                 {"lat tokenizer train: --model-type 'wordpiece': expected bpe or unigram"});
  // Nothing but the test's own files: no half-written or temporary directory.
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"english.txt", "full"}));
}

TEST_F(SentencePieceTest, ADamagedModelIsRefusedInOneLine) {
  train({write("english.txt", english_text())}, 300, "tok");
  const std::string model = read_bytes(dir_ / "tok" / "tokenizer.model");
  ASSERT_GT(model.size(), 1000u);
  for (const std::string& damaged :
       {model.substr(0, model.size() / 2), model.substr(0, 7), std::string("\x0a\xff\xff\xff\xff\x0f", 6),
        std::string("not a model at all"), std::string()}) {
    const std::string message =
        expect_error([&] { lat::sentencepiece_model(damaged, "bad.model"); }, {"'bad.model': "});
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  // A unigram model with an empty piece, on which sentencepiece's trie builder throws its own
  // exception (found by fuzz_sentencepiece).
  expect_error(
      [&] {
        lat::sentencepiece_model(
            read_bytes(std::string(LAT_SOURCE_DIR) + "/tests/fuzz/corpus/sentencepiece/fixed-crash-empty-piece.model"),
            "empty_piece.model");
      },
      {"'empty_piece.model': not a SentencePiece model sentencepiece loads: ", "zero-length key"});
  write("bad.model", model.substr(0, model.size() / 2));
  expect_error([&] { lat::read_tokenizer_file(path("bad.model"), "test"); }, {path("bad.model")});
}

TEST_F(SentencePieceTest, TheCommandLineTrainsEncodesAndDecodes) {
  const std::string text = write("english.txt", english_text());
  const std::string multilingual = write("multilingual.txt", kMultilingual);
  const CliResult trained = run_lat_captured("tokenizer train --vocab-size 500 --out '" + path("tok") + "' '" +
                                                 text + "' '" + multilingual + "'",
                                             dir_);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_EQ(trained.out, "wrote " + path("tok") + "/tokenizer.model (bpe, 500 pieces)\n");
  std::string ids;
  for (int64_t id : read("tok").encode(kMultilingual)) {
    if (!ids.empty()) ids += ' ';
    ids += std::to_string(id);
  }
  for (const std::string& spec : {path("tok"), path("tok") + "/tokenizer.model"}) {
    const CliResult encoded = run_lat_captured("tokenizer encode --tokenizer '" + spec + "' '" + multilingual + "'", dir_);
    EXPECT_EQ(encoded.exit_code, 0) << encoded.err;
    EXPECT_EQ(encoded.out, ids + "\n");
    const CliResult decoded = run_lat_captured("tokenizer decode --tokenizer '" + spec + "' " + ids, dir_);
    EXPECT_EQ(decoded.exit_code, 0) << decoded.err;
    EXPECT_EQ(decoded.out, kMultilingual);
  }
  const CliResult refused = run_lat_captured("tokenizer train --vocab-size 100 --out '" + path("small") + "' '" +
                                                 text + "'",
                                             dir_);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(refused.err,
            "error: lat tokenizer train: --vocab-size 100 is too small: the text needs at least 285 (a piece per "
            "character, 256 byte pieces, <unk>, <s> and </s>)\n");
  EXPECT_FALSE(fs::exists(dir_ / "small"));
}

}  // namespace
