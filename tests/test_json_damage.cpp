// The JSON reader of model files (train/files/json_file.h) and the readers built on it
// (tokenizer.json, config.json) on damaged input: nesting past the depth limit (valid JSON a
// million levels deep), duplicate keys, values too long to print, files that are not regular
// or too large, and tokenizer vocabularies with empty, repeated, multi-character or
// non-string entries. Each error names the file and the key or entry, and stays short.
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/files/checkpoint.h"
#include "train/files/config_json.h"
#include "train/files/json_file.h"
#include "train/files/tokenizer_files.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

using JsonDamageTest = TempDirTest;

/// `depth` nested arrays around 1: "[[1]]" for depth 2.
std::string nested(size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

TEST(JsonText, DepthLimitIsEnforcedWhileParsing) {
  EXPECT_EQ(lat::parse_json_text(nested(64), "s").dump(), nested(64));
  expect_error([] { lat::parse_json_text(nested(65), "load_x: 'f.json'"); },
               {"load_x: 'f.json' nests arrays or objects deeper than 64 levels"});
  // Objects count as levels too, and a million levels are refused as fast as 65.
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"a\":";
  objects += "1";
  objects.append(65, '}');
  expect_error([&] { lat::parse_json_text(objects, "s"); }, {"deeper than 64 levels"});
  const std::string message = expect_error([] { lat::parse_json_text(nested(1'000'000), "s"); },
                                           {"s nests arrays or objects deeper"});
  EXPECT_LT(message.size(), 100u);
}

TEST(JsonText, DuplicateKeysInOneObjectAreErrorsNamingTheKey) {
  expect_error([] { lat::parse_json_text(R"({"a": 1, "b": {"k": 1, "k": 2}})", "s"); },
               {"s has the key 'k' twice in one object"});
  expect_error([] { lat::parse_json_text(R"([{"x": 1}, {"y": 2, "y": 2}])", "s"); }, {"key 'y' twice"});
  // The same key in different objects, or after an array closes, is fine.
  const nlohmann::json j = lat::parse_json_text(R"({"a": {"k": 1}, "b": [{"k": 2}, {"k": 3}], "k": 4})", "s");
  EXPECT_EQ(j["b"][1]["k"], 3);
  EXPECT_EQ(j["k"], 4);
  const std::string key(100'000, 'k');
  const std::string message = expect_error(
      [&] { lat::parse_json_text("{\"" + key + "\": 1, \"" + key + "\": 2}", "s"); }, {"kkk...'"});
  EXPECT_LT(message.size(), 200u);
}

TEST(JsonText, ExcerptsAreShortAndWholeCharacters) {
  EXPECT_EQ(lat::excerpt("abc"), "abc");
  EXPECT_EQ(lat::excerpt(std::string(81, 'x')), std::string(80, 'x') + "...");
  // Cut before a two-byte character that would straddle the limit.
  EXPECT_EQ(lat::excerpt(std::string(79, 'x') + "\xc3\xa9yz"), std::string(79, 'x') + "...");
  EXPECT_EQ(lat::json_excerpt(nlohmann::json::parse(R"({"a":[1,2],"b":"c"})")), R"({"a":[1,2],"b":"c"})");
  const nlohmann::json deep = lat::parse_json_text(nested(60), "s");
  EXPECT_EQ(lat::json_excerpt(deep), std::string(60, '[') + "1" + std::string(19, ']') + "...");
  const std::string quote_and_79_z = std::string("\"").append(79, 'z');
  EXPECT_EQ(lat::json_excerpt(std::string(1'000'000, 'z')), quote_and_79_z + "...");
}

TEST_F(JsonDamageTest, OnlyRegularFilesOfBoundedSizeAreRead) {
  const std::string fifo = path("fifo.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error([&] { lat::read_json_file(fifo, "the tokenizer file"); },
               {fifo, "expected a regular file (the tokenizer file)"});
  expect_error([&] { lat::read_json_file(dir_.string(), "the tokenizer file"); }, {"expected a regular file"});
  expect_error([&] { lat::read_json_file(path("missing.json"), "the tokenizer file"); },
               {"cannot open the tokenizer file", path("missing.json")});
  // A sparse file one byte over the limit: refused from its size, before reading.
  const std::string big = path("big.json");
  write_bytes(big, "{}");
  fs::resize_file(big, lat::kMaxJsonFileBytes + 1);
  expect_error([&] { lat::read_json_file(big, "the config"); },
               {big, std::to_string(lat::kMaxJsonFileBytes + 1) + " bytes, more than the " +
                         std::to_string(lat::kMaxJsonFileBytes)});
  write_bytes(path("ok.json"), R"({"a": [1]})");
  EXPECT_EQ(lat::read_json_file(path("ok.json"), "the config")["a"][0], 1);
}

TEST_F(JsonDamageTest, ConfigJsonErrorsNameTheFile) {
  const std::string config = write("config.json", R"({"x": )" + nested(1'000'000) + "}");
  expect_error([&] { lat::read_lat_config(config, "m.safetensors"); },
               {"load_model_weights: '" + config + "' nests arrays or objects deeper than 64 levels"});
  write("config.json", R"({"lat_config": "a", "lat_config": "b"})");
  expect_error([&] { lat::read_lat_config(config, "m.safetensors"); }, {config, "key 'lat_config' twice"});
  write("config.json", R"({"lat_config": "model: {}"})");
  EXPECT_EQ(lat::read_lat_config(config, "m.safetensors"), "model: {}");
}

TEST_F(JsonDamageTest, TokenizerVocabEntriesAreCheckedOneByOne) {
  const std::string file = path("tokenizer.json");
  auto read_vocab = [&](const std::string& vocab) {
    write("tokenizer.json", R"({"type": "char", "vocab": )" + vocab + "}");
    lat::Checkpoint ckpt;
    lat::read_tokenizer_json(file, ckpt);
    return ckpt.tokenizer_vocab;
  };
  EXPECT_EQ(read_vocab(R"(["\n", "a", "\u00e9"])"), "\na\xc3\xa9");
  expect_error([&] { read_vocab(R"(["a", "", "b"])"); }, {file, "vocab entry 1: expected one character, got \"\""});
  expect_error([&] { read_vocab(R"(["a", "bc"])"); }, {file, "vocab entry 1: expected one character, got \"bc\" (2"});
  expect_error([&] { read_vocab(R"(["a", "b", "a"])"); }, {file, "vocab entry 2: \"a\" repeats entry 0"});
  expect_error([&] { read_vocab(R"(["a", 7])"); }, {file, "vocab entry 1: expected a string, got 7"});
  expect_error([&] { read_vocab(R"(["a", "\u0000"])"); }, {file, "vocab entry 1: expected a character other than NUL"});
  expect_error([&] { read_vocab("[]"); }, {file, "vocab: expected at least one character"});
  // A list entry deep enough to overflow a recursive printer, and one within the depth limit:
  // neither is printed whole.
  std::string message = expect_error([&] { read_vocab("[\"a\", " + nested(1'000'000) + "]"); },
                                     {file, "deeper than 64 levels"});
  EXPECT_LT(message.size(), 300u);
  message = expect_error([&] { read_vocab("[\"a\", " + nested(62) + "]"); },
                         {file, "vocab entry 1: expected a string, got [[[[", "..."});
  EXPECT_LT(message.size(), 300u);
  message = expect_error([&] { read_vocab("[\"" + std::string(100'000, 'q') + "\"]"); },
                         {file, "vocab entry 0: expected one character, got \"qqqq", "...", "(100000 characters)"});
  EXPECT_LT(message.size(), 300u);
}

TEST_F(JsonDamageTest, TokenizerTypeIsChecked) {
  const std::string file = write("tokenizer.json", R"({"type": ")" + std::string(1000, 't') + R"("})");
  lat::Checkpoint ckpt;
  const std::string message = expect_error([&] { lat::read_tokenizer_json(file, ckpt); },
                                           {file, "type: expected char or byte, got 'ttt", "...'"});
  EXPECT_LT(message.size(), 300u);
  write("tokenizer.json", R"({"type": "byte", "vocab_size": 256})");
  lat::read_tokenizer_json(file, ckpt);
  EXPECT_EQ(ckpt.tokenizer_type, "byte");
}

}  // namespace
