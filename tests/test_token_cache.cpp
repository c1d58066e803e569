// The token cache (data/token_cache.h): its bytes, its refusals of damaged or foreign files,
// load_data reading it back; and parallel_encode (data/parallel_encode.h) giving one
// encode()'s ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "data/dataset.h"
#include "data/parallel_encode.h"
#include "data/regular_file.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/token_cache.h"
#include "expect_error.h"
#include "lat/ops.h"
#include "sentencepiece_testing.h"
#include "test_files.h"
#include "tests/lat_command.h"

namespace {

using lat::TokenCacheKey;
using lat::Tokenizer;
using lat::testing::expect_error;
using lat::testing::read_bytes;
using lat::testing::TempDirTest;

std::string cache_bytes(const TokenCacheKey& key, const std::vector<int32_t>& ids) {
  std::ostringstream out;
  lat::write_token_cache(out, key, ids);
  return out.str();
}

TEST(TokenCache, BytesAreTheHeaderThenTheIds) {
  const Tokenizer byte = Tokenizer::byte();
  const TokenCacheKey key = TokenCacheKey::of("hello", byte);
  EXPECT_EQ(key.text_bytes, 5u);
  EXPECT_EQ(key.vocab_size, 256);
  const std::vector<int32_t> ids = {104, 101, 108, 108, 111};
  const std::string bytes = cache_bytes(key, ids);
  ASSERT_EQ(bytes.size(), lat::kTokenCacheHeaderBytes + 2 * ids.size());  // a vocabulary of 256: uint16 ids
  EXPECT_EQ(bytes.substr(0, 8), "LATTOKEN");
  EXPECT_EQ(bytes.substr(8, 8), std::string("\x02\0\0\0\x02\0\0\0", 8));                     // version 2, 2-byte ids
  EXPECT_EQ(bytes.substr(24, 16), std::string("\x05\0\0\0\0\0\0\0\x05\0\0\0\0\0\0\0", 16));  // text bytes, count
  EXPECT_EQ(bytes.substr(40, 4), "\xdf\x72\x12\x55");  // zlib.crc32 of the 10 id bytes: 0x551272df
  EXPECT_EQ(bytes.substr(44, 4), std::string("\x68\0\x65\0", 4));
  EXPECT_EQ(lat::parse_token_cache(bytes, key), ids);

  // Above 65536 ids the ids take 4 bytes.
  TokenCacheKey wide = key;
  wide.vocab_size = 70000;
  const std::vector<int32_t> wide_ids = {69999, 0, 65536, 1, 2};
  const std::string wide_bytes = cache_bytes(wide, wide_ids);
  EXPECT_EQ(wide_bytes.size(), lat::kTokenCacheHeaderBytes + 4 * wide_ids.size());
  EXPECT_EQ(lat::parse_token_cache(wide_bytes, wide), wide_ids);
}

TEST(TokenCache, TheHashCoversTheTextAndTheTokenizer) {
  const Tokenizer byte = Tokenizer::byte();
  const TokenCacheKey key = TokenCacheKey::of("hello\n", byte);
  EXPECT_NE(key.hash, TokenCacheKey::of("hellp\n", byte).hash);
  EXPECT_NE(key.hash, TokenCacheKey::of("hello\n", Tokenizer::char_from_text("hello\n")).hash);
  EXPECT_NE(TokenCacheKey::of("hello\n", Tokenizer::char_from_vocab("\nehlo")).hash,
            TokenCacheKey::of("hello\n", Tokenizer::char_from_vocab("\nehlop")).hash);
  EXPECT_EQ(key.hash, TokenCacheKey::of("hello\n", Tokenizer::byte()).hash);
  const std::string name = key.file_name();
  EXPECT_EQ(name.size(), std::string("tokens-0123456789abcdef.bin").size());
  EXPECT_EQ(name.rfind("tokens-", 0), 0u);
  EXPECT_EQ(name.find_first_not_of("0123456789abcdef", 7), 23u);
}

TEST(TokenCache, DamagedOrForeignBytesAreRefused) {
  const TokenCacheKey key = TokenCacheKey::of("hello", Tokenizer::byte());
  const std::string good = cache_bytes(key, {104, 101, 108, 108, 111});
  const auto parse = [&](const std::string& bytes) { return lat::parse_token_cache(bytes, key); };
  expect_error([&] { parse(good.substr(0, 43)); }, {"43 bytes, shorter than the 44-byte header"});
  std::string bad = good;
  bad[0] = 'X';
  expect_error([&] { parse(bad); }, {"no token cache magic"});
  bad = good;
  bad[8] = 1;  // a cache written before the ids had a checksum
  expect_error([&] { parse(bad); }, {"version 1, expected 2"});
  bad = good;
  bad[12] = 4;
  expect_error([&] { parse(bad); }, {"ids of 4 bytes, expected 2 for a vocabulary of 256"});
  bad = good;
  bad[16] ^= 1;
  expect_error([&] { parse(bad); }, {"its hash is not this text's and tokenizer's"});
  bad = good;
  bad[24] = 6;
  expect_error([&] { parse(bad); }, {"made from 6 bytes of text, the text has 5"});
  bad = good;
  bad[32] = 6;
  expect_error([&] { parse(bad); }, {"the header says 6 ids of 2 bytes, but 10 bytes follow it"});
  bad = good;
  bad[39] = 1;  // a count of 2^56 ids: refused before anything is sized by it
  expect_error([&] { parse(bad); }, {"72057594037927941 ids, more than a text of 5 bytes encodes to"});
  expect_error([&] { parse(good.substr(0, good.size() - 1)); }, {"but 9 bytes follow it"});
  bad = good;
  bad[44] ^= 1;  // id 104 becomes 105: still in the vocabulary, only the checksum tells
  expect_error([&] { parse(bad); }, {"ids do not match their checksum: stored crc32 551272df, the ids have bad019e1"});
  bad = good;
  bad[40] ^= 1;  // the checksum itself damaged
  expect_error([&] { parse(bad); }, {"ids do not match their checksum: stored crc32 551272de, the ids have 551272df"});
  bad = good;
  bad[45] = 1;                             // id 104 + 256, with its checksum (a writer's error, not damage)
  bad.replace(40, 4, "\x9c\x66\x69\x42");  // zlib.crc32 of these ids: 0x4269669c
  expect_error([&] { parse(bad); }, {"id 360 at offset 0 is outside the vocabulary of 256"});
}

// The fuzz harness's seeds are caches of its text: the whole one must parse, or the fuzzer
// would start from nothing but refusals.
TEST(TokenCache, TheFuzzSeedIsAWholeCacheOfTheHarnessText) {
  const std::string text = "fuzz the token cache\n";
  const TokenCacheKey key = TokenCacheKey::of(text, Tokenizer::byte());
  const std::vector<int32_t> ids =
      lat::parse_token_cache(read_bytes(std::string(LAT_SOURCE_DIR) + "/tests/fuzz/corpus/token_cache/narrow.bin"), key);
  EXPECT_EQ(ids, std::vector<int32_t>(text.begin(), text.end()));
  // The damaged seeds get past the checks before their damage (the checksum among them).
  const auto seed = [](const std::string& name) {
    return read_bytes(std::string(LAT_SOURCE_DIR) + "/tests/fuzz/corpus/token_cache/" + name);
  };
  TokenCacheKey wide = key;
  wide.vocab_size = 70000;
  std::vector<int32_t> wide_ids(text.begin(), text.end());
  wide_ids.push_back(69999);
  EXPECT_EQ(lat::parse_token_cache(seed("wide.bin"), wide), wide_ids);
  expect_error([&] { lat::parse_token_cache(seed("id_outside.bin"), key); },
               {"id 300 at offset 20 is outside the vocabulary of 256"});
  expect_error([&] { lat::parse_token_cache(seed("cut_short.bin"), key); },
               {"the header says 21 ids of 2 bytes, but 39 bytes follow it"});
  expect_error([&] { lat::parse_token_cache(seed("huge_count.bin"), wide); },
               {"1152921504606846976 ids, more than a text of 21 bytes encodes to"});
}

using TokenCacheFiles = TempDirTest;

// load_data with a cache directory: encodes and says where to write; then reads the file back;
// a changed text or a damaged file is encoded again, and says why.
TEST_F(TokenCacheFiles, LoadDataReusesAWholeCacheAndRebuildsAStaleOrDamagedOne) {
  const std::string corpus = write("corpus.txt", lat::testing::multilingual_lines(200));
  const std::string model_path = lat::testing::train_sentencepiece(corpus, path("sp"), 400);
  const Tokenizer sp = Tokenizer::subword(lat::sentencepiece_model(read_bytes(model_path), model_path));
  const std::string run = path("run");
  std::filesystem::create_directories(run);
  lat::DataOptions options;
  options.path = corpus;
  options.block_size = 16;

  const lat::LoadedData first = lat::load_data(options, sp, run);
  ASSERT_TRUE(first.token_cache.has_value());
  EXPECT_FALSE(first.token_cache->reused);
  EXPECT_EQ(first.token_cache->note, "");
  EXPECT_EQ(first.token_cache->path, run + "/" + first.token_cache->key.file_name());
  const std::vector<int64_t> expected = sp.encode(read_bytes(corpus));
  EXPECT_EQ(first.dataset.tokens(), std::vector<int32_t>(expected.begin(), expected.end()));
  {
    std::ofstream out(first.token_cache->path, std::ios::binary);
    lat::write_token_cache(out, first.token_cache->key, first.dataset.tokens());
  }

  const lat::LoadedData second = lat::load_data(options, sp, run);
  EXPECT_TRUE(second.token_cache->reused);
  EXPECT_EQ(second.dataset.tokens(), first.dataset.tokens());

  // One byte of the text changes: another cache, and the old one is named stale.
  write("corpus.txt", lat::testing::multilingual_lines(200) + "x");
  const lat::LoadedData changed = lat::load_data(options, sp, run);
  EXPECT_FALSE(changed.token_cache->reused);
  EXPECT_NE(changed.token_cache->path, first.token_cache->path);
  EXPECT_EQ(changed.token_cache->stale, std::vector<std::string>{first.token_cache->path});
  EXPECT_EQ(changed.token_cache->note, first.token_cache->path + " is for other text or another tokenizer");
  EXPECT_EQ(changed.dataset.size(), static_cast<int64_t>(sp.encode(read_bytes(corpus)).size()));

  // The same text again, its cache cut short: encoded again, the damage named.
  write("corpus.txt", lat::testing::multilingual_lines(200));
  const std::string whole = read_bytes(first.token_cache->path);
  lat::testing::write_bytes(first.token_cache->path, whole.substr(0, whole.size() - 2));
  const lat::LoadedData damaged = lat::load_data(options, sp, run);
  EXPECT_FALSE(damaged.token_cache->reused);
  EXPECT_EQ(damaged.token_cache->note.rfind(first.token_cache->path + " is damaged (the header says ", 0), 0u)
      << damaged.token_cache->note;
  EXPECT_EQ(damaged.dataset.tokens(), first.dataset.tokens());

  // One id's low bit flipped, still inside the vocabulary: only the checksum tells; encoded
  // again, the same ids as the fresh encode.
  std::string flipped = whole;
  const size_t width = (flipped.size() - lat::kTokenCacheHeaderBytes) / first.dataset.tokens().size();
  ASSERT_EQ(width, 2u);
  size_t i = 0;
  while ((first.dataset.tokens()[i] ^ 1) >= sp.vocab_size()) ++i;
  flipped[lat::kTokenCacheHeaderBytes + width * i] ^= 1;  // the low byte: little-endian
  lat::testing::write_bytes(first.token_cache->path, flipped);
  const lat::LoadedData wrong_id = lat::load_data(options, sp, run);
  EXPECT_FALSE(wrong_id.token_cache->reused);
  EXPECT_EQ(wrong_id.token_cache->note.rfind(
                first.token_cache->path + " is damaged (ids do not match their checksum: stored crc32 ", 0),
            0u)
      << wrong_id.token_cache->note;
  EXPECT_EQ(wrong_id.dataset.tokens(), first.dataset.tokens());

  // A cache of a version-1 lat (no checksum) is stale in the same way.
  std::string version1 = whole;
  version1[8] = 1;
  lat::testing::write_bytes(first.token_cache->path, version1);
  const lat::LoadedData old = lat::load_data(options, sp, run);
  EXPECT_FALSE(old.token_cache->reused);
  EXPECT_EQ(old.token_cache->note.rfind(first.token_cache->path + " is damaged (version 1, expected 2", 0), 0u)
      << old.token_cache->note;
  EXPECT_EQ(old.dataset.tokens(), first.dataset.tokens());

  // Without a cache directory nothing is looked up.
  EXPECT_FALSE(lat::load_data(options, sp).token_cache.has_value());
}

// The losses of a run's metrics.jsonl, in order: (step, "loss" or "val_loss", value).
std::vector<std::tuple<int64_t, std::string, double>> losses_of(const std::string& metrics_path) {
  std::vector<std::tuple<int64_t, std::string, double>> losses;
  std::istringstream lines(read_bytes(metrics_path));
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    for (const char* key : {"loss", "val_loss"})
      if (j.contains(key)) losses.emplace_back(j["step"].get<int64_t>(), key, j[key].get<double>());
  }
  return losses;
}

// lat train on a cache whose one id was changed within the vocabulary (in the val split, which
// the final eval scores whole): the damage is logged, the text encoded again, the cache rewritten
// as a fresh run writes it, and every loss equals the fresh run's.
TEST_F(TokenCacheFiles, ATrainRunOnACacheWithAChangedIdEqualsAFreshRun) {
  const std::string corpus = write("corpus.txt", lat::testing::multilingual_lines(400));
  const std::string model_path = lat::testing::train_sentencepiece(corpus, path("sp"), 400);
  const Tokenizer sp = Tokenizer::subword(lat::sentencepiece_model(read_bytes(model_path), model_path));
  const auto config = [&](const std::string& run) {
    return write(run + ".yaml",
                 "model: {d_model: 16, n_layers: 1, n_heads: 2, layers: \"attn\"}\n"
                 "data: {path: '" +
                     corpus + "', tokenizer: '" + model_path +
                     "', block_size: 16}\n"
                     "train: {batch_size: 2, max_steps: 2, warmup: 1, eval_every: 0, log_every: 1,"
                     " out_dir: '" +
                     path(run) + "', threads: 1}\n");
  };
  std::filesystem::create_directories(path("capture"));
  const lat::testing::CliResult fresh = lat::testing::run_lat_captured("train '" + config("fresh") + "'",
                                                                       path("capture"));
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  const std::string name = TokenCacheKey::of(read_bytes(corpus), sp).file_name();
  const std::string whole = read_bytes(path("fresh") + "/" + name);

  const std::vector<int64_t> ids = sp.encode(read_bytes(corpus));
  size_t i = ids.size() - 1;  // the last id whose low bit may flip inside the vocabulary
  while ((ids[i] ^ 1) >= sp.vocab_size()) --i;
  ASSERT_GT(i, ids.size() * 9 / 10 + 1);  // a val target
  std::string flipped = whole;
  flipped[lat::kTokenCacheHeaderBytes + 2 * i] ^= 1;
  std::filesystem::create_directories(path("damaged"));
  const std::string damaged_cache = path("damaged") + "/" + name;
  lat::testing::write_bytes(damaged_cache, flipped);

  const lat::testing::CliResult damaged = lat::testing::run_lat_captured("train '" + config("damaged") + "'",
                                                                         path("capture"));
  ASSERT_EQ(damaged.exit_code, 0) << damaged.err;
  EXPECT_TRUE(lat::testing::contains(damaged.out + damaged.err, "token cache: " + damaged_cache +
                                                                    " is damaged (ids do not match their checksum: "
                                                                    "stored crc32 "))
      << damaged.out << damaged.err;
  EXPECT_TRUE(lat::testing::contains(damaged.out + damaged.err, "): encoded the text again")) << damaged.err;
  EXPECT_TRUE(read_bytes(damaged_cache) == whole) << "the cache is rewritten as the fresh run wrote it";
  const auto fresh_losses = losses_of(path("fresh") + "/metrics.jsonl");
  ASSERT_FALSE(fresh_losses.empty());
  EXPECT_EQ(std::get<1>(fresh_losses.back()), "val_loss");
  EXPECT_EQ(losses_of(path("damaged") + "/metrics.jsonl"), fresh_losses);
}

TEST(ParallelEncode, NewlineCutsFallJustAfterANewlineBeforeNonWhitespace) {
  using Cuts = std::vector<size_t>;
  EXPECT_EQ(lat::newline_cuts("aaaa\nbbbb\ncccc\ndddd", 4), (Cuts{0, 5, 10, 15, 19}));
  EXPECT_EQ(lat::newline_cuts("aaaa\nbbbb\ncccc\ndddd", 2), (Cuts{0, 10, 19}));
  EXPECT_EQ(lat::newline_cuts("aaaa\nbbbb\ncccc\ndddd", 1), (Cuts{0, 19}));
  // Never before whitespace: " b", "\n" and "\t" continue the piece.
  EXPECT_EQ(lat::newline_cuts("aa\n bb\n\ncc\n\tdd\nee", 8), (Cuts{0, 8, 15, 17}));
  EXPECT_EQ(lat::newline_cuts("no newline at all", 4), (Cuts{0, 17}));
  EXPECT_EQ(lat::newline_cuts("", 4), (Cuts{0, 0}));
}

// A SentencePiece model whose pieces hold no newline (its trainer reads lines), so a text cut
// after a newline encodes piece by piece exactly as whole: it may say so.
class NewlineSplittingModel : public lat::SubwordModel {
 public:
  explicit NewlineSplittingModel(std::shared_ptr<const lat::SubwordModel> inner) : inner_(std::move(inner)) {}
  const std::string& type() const override { return inner_->type(); }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  std::vector<int64_t> encode(std::string_view text) const override { return inner_->encode(text); }
  std::string decode(const std::vector<int64_t>& ids) const override { return inner_->decode(ids); }
  bool splits_after_newline() const override { return true; }
  bool has_token(int64_t id) const override { return inner_->has_token(id); }
  const std::string& file_contents() const override { return inner_->file_contents(); }
  const char* file_name() const override { return inner_->file_name(); }

 private:
  std::shared_ptr<const lat::SubwordModel> inner_;
};

TEST_F(TokenCacheFiles, ParallelEncodeGivesTheIdsOfOneEncode) {
  const std::string corpus = write("corpus.txt", lat::testing::multilingual_lines(300));
  const std::string model_path = lat::testing::train_sentencepiece(corpus, path("sp"), 400);
  const auto sp = lat::sentencepiece_model(read_bytes(model_path), model_path);
  const Tokenizer splitting = Tokenizer::subword(std::make_shared<NewlineSplittingModel>(sp));
  // About 450 KB: several pieces of at least 64 KiB, with newlines before spaces and tabs.
  const std::string text = lat::testing::multilingual_lines(8000);
  const std::vector<int64_t> whole = splitting.encode(text);
  const int threads = lat::get_num_threads();
  for (int n : {1, 3, 4}) {
    lat::set_num_threads(n);
    EXPECT_EQ(lat::parallel_encode(splitting, text), whole) << n << " threads";
  }
  // A model that may not be cut is encoded whole.
  lat::set_num_threads(4);
  EXPECT_EQ(lat::parallel_encode(Tokenizer::subword(sp), text), sp->encode(text));
  // Invalid UTF-8 in the last piece is named at its offset in the whole text.
  ASSERT_GT(text.size(), size_t{300000});
  std::string bad = text;
  const size_t offset = text.size() - 10;
  bad[offset] = '\xFF';
  expect_error([&] { lat::parallel_encode(splitting, bad); }, {"offset " + std::to_string(offset)});
  lat::set_num_threads(threads);
}

}  // namespace
