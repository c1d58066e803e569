// `lat tokenizer encode` and `lat tokenizer decode` (DESIGN.md, "Tokenizers"): known ids for
// char and byte, decode(encode(text)) == text for every kind of --tokenizer, and one-line
// errors with exit 2 (usage, text or ids the tokenizer refuses) or 1 (a file it cannot read).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "tests/lat_command.h"
#include "tests/test_files.h"
#include "train/files/hf_tokenizer.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

// Accents, CJK, an emoji (4 UTF-8 bytes) and a newline.
const std::string kMultilingual = "café naïve 中文 🙂\n";


class TokenizerCliTest : public TempDirTest {
 protected:
  /// build/lat with `args` (shell words), stdout and stderr captured apart, stdin from the file
  /// `stdin_path` (empty by default).
  CliResult lat(const std::string& args, const std::string& stdin_path = "/dev/null") const {
    return run_lat_captured(args, dir_, stdin_path);
  }

  /// `lat tokenizer encode --tokenizer <tokenizer> FILE` of `text` (from a file: any bytes).
  CliResult encode(const std::string& tokenizer, const std::string& text) const {
    return lat("tokenizer encode --tokenizer " + tokenizer + " '" + write("text.txt", text) + "'");
  }

  /// The ids `encode` printed, with a check that they are one line.
  static std::string ids_of(const CliResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_FALSE(r.out.empty());
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;
    return r.out.substr(0, r.out.size() - 1);
  }

  /// Expects encode then decode through `tokenizer` to give back `text` byte for byte.
  void expect_round_trip(const std::string& tokenizer, const std::string& text) const {
    const std::string ids = ids_of(encode(tokenizer, text));
    const CliResult decoded = lat("tokenizer decode --tokenizer " + tokenizer + " " + ids);
    EXPECT_EQ(decoded.exit_code, 0) << decoded.err;
    EXPECT_EQ(decoded.out, text) << tokenizer;
  }

  /// Expects exit `code` and exactly one stderr line that starts with "error: " and contains
  /// `part`, nothing on stdout.
  static void expect_cli_error(const CliResult& r, int code, const std::string& part) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_TRUE(contains(r.err, part)) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    EXPECT_EQ(r.out, "");
  }

  /// Expects exit `code`, stderr exactly "error: <message>\n" and nothing on stdout.
  static void expect_exact_error(const CliResult& r, int code, const std::string& message) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(r.err, "error: " + message + "\n");
    EXPECT_EQ(r.out, "");
  }

  /// A two-step `lat train` run on `corpus` (char tokenizer; at least 170 characters, for a
  /// validation split of a block) in dir_/run.
  void train_tiny_run(const std::string& corpus) const {
    write("corpus.txt", corpus);
    write("config.yaml",
          "model: {d_model: 16, n_layers: 2, n_heads: 2, layers: \"gdn,attn\"}\n"
          "data: {path: '" +
              path("corpus.txt") +
              "', block_size: 16}\n"
              "train: {threads: 1, batch_size: 2, max_steps: 2, eval_every: 2, eval_batches: 1, "
              "ckpt_every: 2, out_dir: '" +
              path("run") + "'}\n");
    const CliResult r = lat("train '" + path("config.yaml") + "'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
};

TEST_F(TokenizerCliTest, CharIdsIndexTheSortedCharactersOfTheData) {
  write("data.txt", "hello world\n");
  // Sorted distinct characters: '\n' 0, ' ' 1, d 2, e 3, h 4, l 5, o 6, r 7, w 8.
  const CliResult r = lat("tokenizer encode --tokenizer char --data '" + path("data.txt") + "' --text 'hello world'");
  EXPECT_EQ(ids_of(r), "4 3 5 5 6 1 8 6 7 5 2");
  const CliResult back = lat("tokenizer decode --tokenizer char --data '" + path("data.txt") + "' 8 6 7 5 2 0");
  EXPECT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, "world\n");
}

TEST_F(TokenizerCliTest, ByteIdsAreTheUtf8Bytes) {
  std::string expected;
  for (unsigned char byte : kMultilingual) {
    if (!expected.empty()) expected += ' ';
    expected += std::to_string(byte);
  }
  EXPECT_EQ(ids_of(encode("byte", kMultilingual)), expected);
  // Spelled out for the first characters: c a U+00E9 (0xC3 0xA9).
  EXPECT_EQ(expected.rfind("99 97 102 195 169 32", 0), 0u) << expected;
  // The emoji U+1F642 is F0 9F 99 82.
  EXPECT_TRUE(contains(expected, "240 159 153 130 10")) << expected;
}

TEST_F(TokenizerCliTest, EncodeReadsStandardInputWithoutTextOrFile) {
  EXPECT_EQ(ids_of(lat("tokenizer encode --tokenizer byte", write("stdin.txt", "Hi\n"))), "72 105 10");
  // Nothing to encode: an empty line.
  const CliResult empty = lat("tokenizer encode --tokenizer byte");
  EXPECT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_EQ(empty.out, "\n");
}

TEST_F(TokenizerCliTest, RoundTripsThroughCharAndByte) {
  write("data.txt", kMultilingual);
  expect_round_trip("char --data '" + path("data.txt") + "'", kMultilingual);
  expect_round_trip("byte", kMultilingual);
}

TEST_F(TokenizerCliTest, RoundTripsThroughTokenizerJsonOfBothForms) {
  const lat::Tokenizer tokenizer = lat::Tokenizer::char_from_text(kMultilingual);
  write("lat_tokenizer.json", "{\"type\": \"char\", \"vocab\": " +
                                  nlohmann::json(std::vector<std::string>{"c", "a", "f", "é", " ", "n", "ï", "v", "e",
                                                                          "中", "文", "🙂", "\n"})
                                      .dump() +
                                  "}");
  expect_round_trip("'" + path("lat_tokenizer.json") + "'", kMultilingual);
  // Ids in the file's order, not sorted: c is 0, a 1, f 2, é 3.
  EXPECT_EQ(ids_of(lat("tokenizer encode --tokenizer '" + path("lat_tokenizer.json") + "' --text café")), "0 1 2 3");

  write("hf_char.json", lat::hf_tokenizer_json(tokenizer).dump());
  expect_round_trip("'" + path("hf_char.json") + "'", kMultilingual);
  write("hf_byte.json", lat::hf_tokenizer_json(lat::Tokenizer::byte()).dump());
  expect_round_trip("'" + path("hf_byte.json") + "'", kMultilingual);
  EXPECT_EQ(ids_of(lat("tokenizer encode --tokenizer '" + path("hf_byte.json") + "' --text é")), "195 169");
}

TEST_F(TokenizerCliTest, RoundTripsThroughACheckpointARunAndAnExport) {
  std::string corpus;
  for (int i = 0; i < 20; ++i) corpus += kMultilingual;
  ASSERT_NO_FATAL_FAILURE(train_tiny_run(corpus));
  const CliResult exported = lat("export --checkpoint '" + path("run") + "' --format safetensors --out '" +
                                 path("export") + "'");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  // The ids are those of the char vocabulary of the training text.
  const std::string char_ids = ids_of(
      lat("tokenizer encode --tokenizer char --data '" + path("corpus.txt") + "' --text 'naïve 中文'"));
  const std::string checkpoint_bytes = read_bytes(path("run/ckpt_00000002.h5"));
  const std::string latest = read_bytes(path("run/latest"));
  for (const std::string& source :
       std::vector<std::string>{path("run"), path("run/ckpt_00000002.h5"), path("export"),
                                path("export/model.safetensors"), path("export/tokenizer.json")}) {
    SCOPED_TRACE(source);
    expect_round_trip("'" + source + "'", kMultilingual);
    EXPECT_EQ(ids_of(lat("tokenizer encode --tokenizer '" + source + "' --text 'naïve 中文'")), char_ids);
  }
  // Reading a run changes nothing in it.
  EXPECT_EQ(read_bytes(path("run/ckpt_00000002.h5")), checkpoint_bytes);
  EXPECT_EQ(read_bytes(path("run/latest")), latest);
}

TEST_F(TokenizerCliTest, UsageErrorsExitTwo) {
  write("data.txt", "abc");
  const std::string data = " --data '" + path("data.txt") + "'";
  expect_cli_error(lat("tokenizer encode --text abc"), 2, "--tokenizer is required");
  expect_cli_error(lat("tokenizer encode --tokenizer byte --text abc '" + path("data.txt") + "'"), 2,
                   "--text excludes file");
  expect_cli_error(lat("tokenizer encode --tokenizer char --text abc"), 2, "--tokenizer char: needs --data FILE");
  expect_cli_error(lat("tokenizer encode --tokenizer byte --text abc" + data), 2,
                   "--data: only --tokenizer char takes a text, got --tokenizer 'byte'");
  expect_cli_error(lat("tokenizer decode --tokenizer byte"), 2, "ids is required");
  expect_cli_error(lat("tokenizer decode --tokenizer byte 65 x7"), 2,
                   "lat tokenizer decode: id 'x7' is not an integer");
  expect_cli_error(lat("tokenizer decode --tokenizer byte 65 99999999999999999999"), 2,
                   "id '99999999999999999999' is not an integer");
  expect_cli_error(
      lat("tokenizer decode --tokenizer byte 65 256"), 2,
      "lat tokenizer decode: id 256 is outside the vocabulary of the byte tokenizer (256 tokens: ids 0..255)");
  expect_cli_error(lat("tokenizer decode --tokenizer char" + data + " 3"), 2,
                   "id 3 is outside the vocabulary of the char tokenizer (3 tokens: ids 0..2)");
  expect_cli_error(lat("tokenizer decode --tokenizer byte -- -1"), 2, "id -1 is outside the vocabulary");
  expect_cli_error(lat("tokenizer encode --tokenizer char" + data + " --text 'abxc'"), 2,
                   "character 'x' (U+0078) at byte offset 2 is not in the char vocabulary (3 characters)");
  expect_cli_error(lat("tokenizer encode --tokenizer char" + data + " --text 'ab中'"), 2, "at byte offset 2");
  expect_cli_error(lat("tokenizer encode --tokenizer '" + path("missing") + "' --text a"), 2,
                   "--tokenizer '" + path("missing") + "': no such file or directory");
}

TEST_F(TokenizerCliTest, UnreadableOrForeignFilesExitOne) {
  const std::string not_json = write("not_json.json", "hello");
  expect_cli_error(lat("tokenizer encode --tokenizer '" + not_json + "' --text a"), 1,
                   "lat tokenizer: '" + not_json + "' is not valid JSON");
  nlohmann::ordered_json bpe = lat::hf_tokenizer_json(lat::Tokenizer::byte());
  bpe["model"]["merges"] = nlohmann::json::array({"a b"});
  const std::string with_merges = write("bpe.json", bpe.dump());
  expect_cli_error(lat("tokenizer encode --tokenizer '" + with_merges + "' --text a"), 1,
                   "lat tokenizer: '" + with_merges + "': model.merges[0]: token \"ab\" is not in model.vocab");
  const std::string not_h5 = write("fake.h5", "not hdf5");
  expect_cli_error(lat("tokenizer encode --tokenizer '" + not_h5 + "' --text a"), 1, not_h5);
  // A text file or --data file that cannot be read is named as what it is.
  expect_exact_error(
      lat("tokenizer encode --tokenizer byte '" + path("no_such_text.txt") + "'"), 1,
      "lat tokenizer: cannot open the text file '" + path("no_such_text.txt") + "': No such file or directory");
  expect_exact_error(
      lat("tokenizer encode --tokenizer char --data '" + path("no_such_data.txt") + "' --text a"), 1,
      "lat tokenizer: cannot open the --data file '" + path("no_such_data.txt") + "': No such file or directory");
  fs::create_directories(dir_ / "a_dir");
  expect_exact_error(lat("tokenizer encode --tokenizer byte '" + path("a_dir") + "'"), 1,
                     "lat tokenizer: the text file '" + path("a_dir") + "' is a directory, expected a regular file");
  // A GGUF file (by its name or its magic) and a file that is no tokenizer file lat reads: named
  // as such, with what lat reads, before any JSON parser sees them.
  const std::string expected_files =
      "a tokenizer.json, a SentencePiece .model, a checkpoint (.h5) or an exported model.safetensors";
  const std::string gguf = write("model.gguf", std::string("GGUF\x03\0\0\0\0\0\0\0", 12));
  const std::string gguf_by_magic = write("weights.bin", std::string("GGUF\x03\0\0\0\0\0\0\0", 12));
  const std::string gguf_by_name = write("empty.gguf", "");
  for (const std::string& file : {gguf, gguf_by_magic, gguf_by_name})
    expect_exact_error(lat("tokenizer encode --tokenizer '" + file + "' --text a"), 1,
                       "lat tokenizer: '" + file +
                           "' is a GGUF file: lat does not read tokenizers from GGUF files (expected " +
                           expected_files + ")");
  const std::string notes = write("notes.txt", "hello");
  expect_exact_error(lat("tokenizer decode --tokenizer '" + notes + "' 1"), 1,
                     "lat tokenizer: '" + notes + "' is not a tokenizer file lat reads: expected " + expected_files);
  const std::string with_nul = write("nul.txt", std::string("ab\0c", 4));
  expect_cli_error(lat("tokenizer encode --tokenizer char --data '" + with_nul + "' --text a"), 1,
                   "lat tokenizer: --data '" + with_nul + "': NUL byte at offset 2: not text for the char tokenizer");
  const std::string empty = write("empty.txt", "");
  expect_cli_error(lat("tokenizer encode --tokenizer char --data '" + empty + "' --text a"), 1,
                   "lat tokenizer: --data '" + empty + "' is empty");
  // A model trained on token ids (the mqar task): its run, its checkpoint and its export.
  write("mqar.yaml",
        "model: {d_model: 16, n_layers: 1, n_heads: 1, layers: \"attn\"}\n"
        "data: {task: mqar, block_size: 16, mqar: {vocab: 16, pairs: [2]}}\n"
        "train: {threads: 1, batch_size: 1, max_steps: 1, eval_every: 1, eval_batches: 1, "
        "ckpt_every: 1, out_dir: '" +
            path("mqar") + "'}\n");
  ASSERT_EQ(lat("train '" + path("mqar.yaml") + "'").exit_code, 0);
  ASSERT_EQ(lat("export --checkpoint '" + path("mqar") + "' --format safetensors --out '" + path("mqar_export") + "'")
                .exit_code,
            0);
  for (const std::string& source : std::vector<std::string>{path("mqar"), path("mqar_export")}) {
    expect_cli_error(lat("tokenizer encode --tokenizer '" + source + "' --text a"), 1,
                     "carries no tokenizer: the model was trained on token ids");
    expect_cli_error(lat("tokenizer decode --tokenizer '" + source + "' 1"), 1, "carries no tokenizer");
  }
  // An empty directory: no tokenizer, checkpoint or run (a usage error).
  fs::create_directories(dir_ / "empty");
  expect_exact_error(lat("tokenizer encode --tokenizer '" + path("empty") + "' --text a"), 2,
                     "lat tokenizer: directory '" + path("empty") +
                         "' holds no tokenizer.json, tokenizer.model, checkpoint (model.h5) or run ('latest', "
                         "ckpt_*.h5)");
}

}  // namespace
