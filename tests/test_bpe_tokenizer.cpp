// Byte-level BPE read from a Hugging Face tokenizer.json (data/bpe_tokenizer.h), on small
// tokenizer.json files written here. Every expected id list below was worked out by Hugging
// Face tokenizers 0.23.3 (Tokenizer.from_str(the same JSON).encode(text,
// add_special_tokens=False).ids), offline, and is written in as a known answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.h"
#include "data/byte_level.h"
#include "data/utf8.h"
#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/files/tokenizer_files.h"

namespace {

using lat::testing::expect_error;
using json = nlohmann::ordered_json;
using Ids = std::vector<int64_t>;

constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::vector<std::string> kMerges = {"Ġ t", "h e", "Ġt he", "i n", "a t", "Ġ c", "Ġc at", "Ġ h", "Ġh at", "Ġ in"};

json byte_level(bool add_prefix_space = false, bool use_regex = true) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json llama3_pre_tokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level(false, false)}}};
}

json added_token(const std::string& content, bool special, bool normalized, bool lstrip = false, bool rstrip = false,
                 bool single_word = false) {
  return {{"id", 0},          {"content", content}, {"single_word", single_word}, {"lstrip", lstrip},
          {"rstrip", rstrip}, {"normalized", normalized}, {"special", special}};
}

// The vocabulary of every test tokenizer: byte b's byte-level character is id b; merge i makes
// id 256 + i (so "Ġthe" is 258, "Ġcat" 262, "Ġhat" 264).
json tiny_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string c;
    lat::append_utf8(c, lat::byte_level_char(static_cast<unsigned char>(b)));
    vocab[c] = b;
  }
  for (size_t i = 0; i < kMerges.size(); ++i) {
    std::string merged = kMerges[i];
    merged.erase(merged.find(' '), 1);
    vocab[merged] = 256 + i;
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level()},
          {"post_processor", nullptr},
          {"decoder", byte_level()},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", kMerges}}}};
}

std::shared_ptr<const lat::SubwordModel> load(const json& j) { return lat::bpe_model_from_json(j.dump(), "t.json"); }

TEST(BpeTokenizer, Gpt2ByteLevelRegexMergesByRank) {
  const auto model = load(tiny_tokenizer());
  EXPECT_EQ(model->type(), "bpe");
  EXPECT_STREQ(model->file_name(), "tokenizer.json");
  EXPECT_EQ(model->vocab_size(), 266);
  // "the" has no "t he" merge; " hat" merges "a t" (rank 4) before "Ġ h" (rank 7).
  EXPECT_EQ(model->encode("the cat in the hat"), (Ids{116, 257, 262, 265, 258, 264}));
  EXPECT_EQ(model->decode({116, 257, 262, 265, 258, 264}), "the cat in the hat");
  EXPECT_EQ(model->encode(""), Ids{});
}

// \s is Unicode's White_Space, as in Oniguruma: U+180E is not a space (PCRE2's own \s has
// it), so "\u180e'" is one word of punctuation; U+0085 and U+2028 are spaces.
TEST(BpeTokenizer, RegexSpacesAreOniguruma) {
  EXPECT_EQ(load(tiny_tokenizer())->encode("a\u180e's b\u0085 \u2028c"),
            (Ids{97, 225, 160, 142, 39, 115, 32, 98, 194, 133, 32, 226, 128, 168, 99}));
}

TEST(BpeTokenizer, FileContentsAreTheJsonByteForByte) {
  const std::string text = tiny_tokenizer().dump(2) + "\n";
  EXPECT_EQ(lat::bpe_model_from_json(text, "t.json")->file_contents(), text);
}

TEST(BpeTokenizer, AddPrefixSpace) {
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = byte_level(true);
  EXPECT_EQ(load(j)->encode("the cat"), (Ids{258, 262}));
}

TEST(BpeTokenizer, AddedTokensAreCutOutFirstWithTheirFlags) {
  json j = tiny_tokenizer();
  // 'id' is what the file says; tokenizers numbers new added tokens after the vocabulary
  // (266, 267, 268) whatever it says, and so does lat.
  j["added_tokens"] = {added_token("<|endoftext|>", true, false), added_token("[M]", true, false, true, true),
                       added_token("cat", false, true, false, false, true)};
  j["added_tokens"][0]["id"] = 300;
  const auto model = load(j);
  EXPECT_EQ(model->vocab_size(), 269);
  // [M] takes the spaces around it; "cat" inside "concat" is not a single word.
  EXPECT_EQ(model->encode("the<|endoftext|>cat  [M]  in concat cat."),
            (Ids{116, 257, 266, 268, 267, 259, 261, 111, 110, 99, 260, 32, 268, 46}));
  // Added tokens decode to their text; bytes cut in a character decode to U+FFFD, as tokenizers does.
  EXPECT_EQ(model->decode({266, 116, 257, 195, 267, 0xE2, 0x82}), "<|endoftext|>the\xEF\xBF\xBD[M]\xEF\xBF\xBD");
  json prefixed = j;
  prefixed["pre_tokenizer"] = byte_level(true);
  // The prefix space goes before each piece between added tokens.
  EXPECT_EQ(load(prefixed)->encode("the<|endoftext|>cat"), (Ids{258, 266, 268}));
}

TEST(BpeTokenizer, NfcNormalizer) {
  json j = tiny_tokenizer();
  EXPECT_EQ(load(j)->encode("e\xCC\x81"), (Ids{101, 204, 129}));  // e + U+0301 as they are
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(load(j)->encode("e\xCC\x81"), (Ids{195, 169}));  // U+00E9
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  EXPECT_EQ(load(j)->encode("e\xCC\x81"), (Ids{195, 169}));
}

TEST(BpeTokenizer, IgnoreMergesTakesAWordThatIsAToken) {
  json j = tiny_tokenizer();
  j["model"]["vocab"]["cat"] = 266;  // no merge chain leads to it
  EXPECT_EQ(load(j)->encode("cat"), (Ids{99, 260}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j)->encode("cat"), (Ids{266}));
}

TEST(BpeTokenizer, MergesAsPairs) {
  json j = tiny_tokenizer();
  json pairs = json::array();
  for (const std::string& m : kMerges) pairs.push_back({m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1)});
  j["model"]["merges"] = pairs;
  EXPECT_EQ(load(j)->encode("the cat in the hat"), (Ids{116, 257, 262, 265, 258, 264}));
}

TEST(BpeTokenizer, SplitDigitsAndRemovedPreTokenizers) {
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = llama3_pre_tokenizer();
  EXPECT_EQ(load(j)->encode("abc 12345 x's\n\nthe"),
            (Ids{97, 98, 99, 32, 49, 50, 51, 52, 53, 32, 120, 39, 115, 10, 10, 116, 257}));
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level()}}};
  EXPECT_EQ(load(j)->encode("a 123 the"), (Ids{97, 32, 49, 50, 51, 258}));
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}, {"invert", false}},
                          byte_level(false, false)}}};
  EXPECT_EQ(load(j)->encode("a b  cat"), (Ids{97, 98, 99, 260}));
}

TEST(BpeTokenizer, PostProcessorsThatTransformersWritesReadAsTheSameTokenizer) {
  json j = tiny_tokenizer();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
                         {"special_tokens", json::object()}};
  EXPECT_EQ(load(j)->encode("the cat"), (Ids{116, 257, 262}));
  j["post_processor"] = {{"type", "Sequence"}, {"processors", {byte_level(), j["post_processor"]}}};
  EXPECT_EQ(load(j)->encode("the cat"), (Ids{116, 257, 262}));
}

TEST(BpeTokenizer, HolesAndIdsOutsideTheVocabulary) {
  json j = tiny_tokenizer();
  j["model"]["vocab"]["zz"] = 400;  // ids 266..399 are holes
  const auto model = load(j);
  EXPECT_EQ(model->vocab_size(), 401);
  EXPECT_TRUE(model->has_token(400));
  EXPECT_FALSE(model->has_token(300));
  EXPECT_FALSE(model->has_token(-1));
  EXPECT_EQ(model->decode({400}), "zz");
  expect_error([&] { model->decode({300}); }, {"BPE decode: id 300 has no token in the bpe tokenizer"});
  expect_error([&] { model->decode({401}); }, {"BPE decode: id 401 is outside [0, 401) of the bpe tokenizer"});
  expect_error([&] { model->decode({-1}); }, {"BPE decode: id -1 is outside [0, 401)"});
}

TEST(BpeTokenizer, InvalidUtf8IsRefused) {
  const auto model = load(tiny_tokenizer());
  expect_error([&] { model->encode("ab\xC3"); }, {"BPE encode: invalid UTF-8 at byte offset 2"});
}

TEST(BpeTokenizer, RefusesWhatItDoesNotHonour) {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  json metaspace = {{"type", "Metaspace"}};
  json merged = llama3_pre_tokenizer();
  merged["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
  json inverted = llama3_pre_tokenizer();
  inverted["pretokenizers"][0]["invert"] = true;
  json byte_level_first = {{"type", "Sequence"}, {"pretokenizers", {byte_level(), {{"type", "Digits"}}}}};
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["model"]["byte_fallback"] = true; }, "'t.json': model.byte_fallback: lat reads false, got true"},
      {[](json& j) { j["model"]["unk_token"] = "<unk>"; }, "'t.json': model.unk_token: lat reads null, got \"<unk>\""},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, "'t.json': model.dropout: lat reads null, got 0.1"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "'t.json': model.continuing_subword_prefix: lat reads null or \"\", got \"##\""},
      {[](json& j) { j["model"]["type"] = "WordPiece"; }, "'t.json': model.type: lat reads BPE, got \"WordPiece\""},
      {[](json& j) { j["normalizer"] = {{"type", "NFKC"}}; },
       "'t.json': normalizer.type: lat reads null, NFC or a Sequence of NFC, got 'NFKC'"},
      {[&](json& j) { j["pre_tokenizer"] = metaspace; },
       "'t.json': pre_tokenizer.type: lat reads ByteLevel, Split, Digits or a Sequence of them, got 'Metaspace'"},
      {[](json& j) { j["pre_tokenizer"] = nullptr; },
       "'t.json': pre_tokenizer: lat reads a byte-level BPE: expected a ByteLevel pre-tokenizer, got null"},
      {[&](json& j) { j["pre_tokenizer"] = merged; },
       "'t.json': pre_tokenizer.pretokenizers[0].behavior: lat reads Isolated or Removed, got \"MergedWithPrevious\""},
      {[&](json& j) { j["pre_tokenizer"] = inverted; }, "'t.json': pre_tokenizer.pretokenizers[0].invert: lat reads false, got true"},
      {[&](json& j) { j["pre_tokenizer"] = byte_level_first; },
       "'t.json': pre_tokenizer.pretokenizers[0]: lat reads a ByteLevel pre-tokenizer only as the last step"},
      {[](json& j) { j["decoder"] = nullptr; }, "'t.json': decoder: lat reads a ByteLevel decoder, got null"},
      {[](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; },
       "'t.json': post_processor: lat reads null, ByteLevel, TemplateProcessing or a Sequence of them, got \"RobertaProcessing\""},
      {[](json& j) { j["truncation"] = {{"max_length", 8}}; }, "'t.json': truncation: lat reads null, got {\"max_length\":8}"},
      {[](json& j) { j["model"]["merges"].push_back("Ġ q"); }, "'t.json': model.merges[10]: token \"Ġq\" is not in model.vocab"},
      {[](json& j) { j["model"]["merges"].push_back("a b c"); },
       "'t.json': model.merges[10]: expected \"a b\" (two tokens and one space), got \"a b c\""},
      {[](json& j) { j["model"]["vocab"]["zz"] = 16777216; },
       "'t.json': model.vocab[\"zz\"]: expected an id in [0, 16777215], got 16777216"},
      {[](json& j) { j["model"]["vocab"]["zz"] = 3; }, "both have id 3"},
  };
  for (const auto& [change, message] : cases) {
    json j = tiny_tokenizer();
    change(j);
    expect_error([&] { load(j); }, {message});
  }
  expect_error([] { lat::bpe_model_from_json("{\"model\": [", "t.json"); }, {"'t.json': not valid JSON: "});
  expect_error([] { lat::bpe_model_from_json(std::string(100, '[') + std::string(100, ']'), "t.json"); },
               {"'t.json': nests arrays or objects deeper than 64 levels"});
}

// read_tokenizer_file: a Hugging Face tokenizer.json that is not lat's char or byte form is a BPE.
TEST(BpeTokenizer, ReadTokenizerFileReadsIt) {
  lat::testing::TempDir dir("bpe_tokenizer_");
  const std::filesystem::path path = dir.dir() / "tokenizer.json";
  lat::testing::write_bytes(path, tiny_tokenizer().dump());
  const std::optional<lat::Tokenizer> tokenizer = lat::read_tokenizer_file(dir.dir().string(), "lat tokenizer");
  ASSERT_TRUE(tokenizer);
  EXPECT_EQ(tokenizer->type(), "bpe");
  EXPECT_EQ(tokenizer->encode("the cat"), (Ids{116, 257, 262}));
  json j = tiny_tokenizer();
  j["model"]["byte_fallback"] = true;
  lat::testing::write_bytes(path, j.dump());
  expect_error([&] { lat::read_tokenizer_file(path.string(), "lat tokenizer"); },
               {"lat tokenizer: '" + path.string() + "': model.byte_fallback: lat reads false, got true"});
}

const std::string kMultilingual =
    "Café naïve résumé façade — Ünïcödé e\u0301 o\u0308\n\n\n"
    "日本語のテキスト、中文文本，한국어 텍스트 🚀🎉👨‍👩‍👧\n"
    "    four spaces   three\t\ttabs\r\nCRLF\n\n  \n"
    "digits 0123456789 3.14159 1,000,000 ١٢٣ ½ Ⅻ\n"
    "I'm can't WE'LL\u00a0nbsp\u3000ideographic\n";

std::string shakespeare() {
  const std::filesystem::path path = std::filesystem::path(LAT_SOURCE_DIR) / "data" / "tinyshakespeare.txt";
  return std::filesystem::exists(path) ? lat::testing::read_bytes(path) : std::string();
}

TEST(BpeTokenizer, DecodeOfEncodeIsTheText) {
  for (const json& pre : {byte_level(), byte_level(true), llama3_pre_tokenizer()}) {
    json j = tiny_tokenizer();
    j["pre_tokenizer"] = pre;
    j["normalizer"] = {{"type", "NFC"}};
    const auto model = load(j);
    const std::string nfc_text = "Café naïve 日本語 🚀 \n\n  x 123";
    EXPECT_EQ(model->decode(model->encode(nfc_text)), pre["add_prefix_space"] == true ? " " + nfc_text : nfc_text);
    j["normalizer"] = nullptr;
    const auto raw = load(j);
    if (pre["add_prefix_space"] == true) continue;
    EXPECT_EQ(raw->decode(raw->encode(kMultilingual)), kMultilingual);
    const std::string text = shakespeare();
    if (text.empty()) GTEST_SKIP() << "data/tinyshakespeare.txt is absent (tools/fetch_data.sh puts it there)";
    EXPECT_EQ(raw->decode(raw->encode(text)), text);
  }
}

// Encoding a text in pieces cut after a '\n' before a non-space character gives the ids of
// the whole: what splits_after_newline() promises, so that data can be encoded in parallel.
Ids encode_in_pieces(const lat::SubwordModel& model, const std::string& text) {
  Ids ids;
  size_t start = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] != '\n' || text[i + 1] == ' ' || text[i + 1] == '\n' || text[i + 1] == '\r' || text[i + 1] == '\t') continue;
    const Ids piece = model.encode(std::string_view(text).substr(start, i + 1 - start));
    ids.insert(ids.end(), piece.begin(), piece.end());
    start = i + 1;
  }
  const Ids last = model.encode(std::string_view(text).substr(start));
  ids.insert(ids.end(), last.begin(), last.end());
  return ids;
}

TEST(BpeTokenizer, SplitsAfterNewline) {
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = llama3_pre_tokenizer();
  const auto llama3 = load(j);
  EXPECT_TRUE(llama3->splits_after_newline());
  EXPECT_EQ(encode_in_pieces(*llama3, kMultilingual), llama3->encode(kMultilingual));
  // GPT-2's pattern puts "\n\n" at the end of a text in one word, before a letter in two.
  const auto gpt2 = load(tiny_tokenizer());
  EXPECT_FALSE(gpt2->splits_after_newline());
  EXPECT_EQ(gpt2->encode("a\n\nb"), (Ids{97, 10, 10, 98}));
  json with_newline_token = j;
  with_newline_token["added_tokens"] = {added_token("\n\n", false, false)};
  EXPECT_FALSE(load(with_newline_token)->splits_after_newline());
  json prefixed = j;
  prefixed["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  EXPECT_FALSE(load(prefixed)->splits_after_newline());
  const std::string text = shakespeare();
  if (text.empty()) GTEST_SKIP() << "data/tinyshakespeare.txt is absent (tools/fetch_data.sh puts it there)";
  EXPECT_EQ(encode_in_pieces(*llama3, text), llama3->encode(text));
}

// encode is const and shares its word cache: threads encoding at once get the ids of one.
TEST(BpeTokenizer, EncodesFromSeveralThreadsAtOnce) {
  const auto model = load(tiny_tokenizer());
  const std::string text = kMultilingual + kMultilingual + "the cat in the hat\n";
  const Ids expected = load(tiny_tokenizer())->encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 20; ++repeat) got[t] = model->encode(text);
    });
  for (std::thread& thread : threads) thread.join();
  for (const Ids& ids : got) EXPECT_EQ(ids, expected);
}

TEST(ByteLevel, AlphabetAndLossyUtf8) {
  EXPECT_EQ(lat::byte_level_char(' '), U'\u0120');
  EXPECT_EQ(lat::byte_level_char('\n'), U'\u010A');
  EXPECT_EQ(lat::byte_level_char('a'), U'a');
  EXPECT_EQ(lat::byte_level_char(0xAD), U'\u0143');
  for (int b = 0; b < 256; ++b) EXPECT_EQ(lat::byte_level_byte(lat::byte_level_char(static_cast<unsigned char>(b))), b);
  EXPECT_EQ(lat::byte_level_byte(U'\u0144'), -1);
  EXPECT_EQ(lat::from_byte_level("ĠhelloĊ"), " hello\n");
  EXPECT_EQ(lat::from_byte_level("<|a b|>"), "<|a b|>");  // ' ' is not a byte-level character
  // One U+FFFD per maximal ill-formed subsequence (Rust's String::from_utf8_lossy).
  EXPECT_EQ(lat::utf8_lossy("a\xE2\x82"), "a\xEF\xBF\xBD");
  EXPECT_EQ(lat::utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(lat::utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(lat::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(lat::utf8_lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");
}

}  // namespace
