// Tokenizers, dataset readers (text, raw and llm.c .bin, HDF5) on files this test writes,
// and the files they refuse (an HDF5 or text file read as bin, a damaged llm.c header, a FIFO,
// ids too large for a vocabulary taken from the data),
// the positional split, and the batch loader: targets are inputs shifted by one (on a
// stream whose token at offset i is i, as llm.c's dev/test/test_dataloader.c does),
// batches are pure functions of (seed, step), rank shares concatenate to the 1-rank
// batch, and the sequential eval iterator covers the val split exactly once.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/token_files.h"
#include "data/tokenizer.h"
#include "lat/lat.h"
#include "tests/expect_error.h"
#include "train/config/config.h"

namespace lat {
namespace {

using testing::expect_error;

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("lat_test_data_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }

  template <class T>
  std::string write_raw(const std::string& name, const std::vector<T>& values, const std::string& prefix = "") const {
    std::string bytes = prefix;
    bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
    return write_bytes(name, bytes);
  }

  // llm.c's layout: 256 int32 header (magic, version, count), then the tokens.
  template <class T>
  std::string write_llmc(const std::string& name, const std::vector<T>& values, int32_t version,
                         int32_t count_in_header) const {
    std::vector<int32_t> header(256, 0);
    header[0] = kLlmcMagic;
    header[1] = version;
    header[2] = count_in_header;
    return write_raw(name, values, std::string(reinterpret_cast<const char*>(header.data()), 1024));
  }

  // One 1-D dataset `dataset` of `mem_type` elements (written from `values`) in a new file.
  template <class T>
  std::string write_h5(const std::string& name, const std::string& dataset, const std::vector<T>& values,
                       hid_t file_type, hid_t mem_type) const {
    hid_t file = H5Fcreate(path(name).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[1] = {values.size()};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t data = H5Dcreate2(file, dataset.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Dwrite(data, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    H5Dclose(data);
    H5Sclose(space);
    H5Fclose(file);
    return path(name);
  }

  fs::path dir_;
};

std::vector<int32_t> iota_tokens(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i);
  return v;
}

std::vector<int32_t> as_vector(const Dataset& d) { return d.tokens(); }

// ---- tokenizers ------------------------------------------------------------------------------

TEST(CharTokenizer, SortedVocabAndRoundTripWithMultiByteCharacters) {
  const std::string text = "hello w\xC3\xB6rld \xE2\x9C\x93\n";  // "hello wörld ✓\n"
  Tokenizer tok = Tokenizer::char_from_text(text);
  EXPECT_EQ(tok.type(), "char");
  // Sorted by code point: \n, ' ', d, e, h, l, o, r, w, ö (U+00F6), ✓ (U+2713).
  EXPECT_EQ(tok.vocab_string(), "\n dehlorw\xC3\xB6\xE2\x9C\x93");
  EXPECT_EQ(tok.vocab_size(), 11);
  std::vector<int64_t> ids = tok.encode(text);
  EXPECT_EQ(ids, (std::vector<int64_t>{4, 3, 5, 5, 6, 1, 8, 9, 7, 5, 2, 1, 10, 0}));
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.decode_one(10), "\xE2\x9C\x93");

  Tokenizer restored = Tokenizer::char_from_vocab(tok.vocab_string());
  EXPECT_EQ(restored.vocab_size(), 11);
  EXPECT_EQ(restored.encode(text), ids);
}

TEST(CharTokenizer, Errors) {
  Tokenizer tok = Tokenizer::char_from_text("abc");
  expect_error([&] { tok.encode("abz"); }, {"'z' (U+007A) at byte offset 2"});
  expect_error([&] { tok.encode("a\n"); }, {"U+000A"});
  expect_error([&] { Tokenizer::char_from_text("a\xC3"); }, {"invalid UTF-8 at byte offset 1"});
  expect_error([&] { Tokenizer::char_from_text("\xC0\x80"); }, {"invalid UTF-8"});
  expect_error([&] { Tokenizer::char_from_vocab("aba"); }, {"appears twice"});
  expect_error([&] { tok.decode({3}); }, {"id 3"});
  expect_error([&] { Tokenizer::create("bpe", "x"); }, {"data.tokenizer"});
  expect_error([&] { Tokenizer::byte().vocab_string(); }, {"char"});
}

TEST(ByteTokenizer, BytesRoundTrip) {
  Tokenizer tok = Tokenizer::byte();
  EXPECT_EQ(tok.type(), "byte");
  EXPECT_EQ(tok.vocab_size(), 256);
  const std::string text = "a\xC3\xA9\xFF";
  std::vector<int64_t> ids = tok.encode(text);
  EXPECT_EQ(ids, (std::vector<int64_t>{97, 0xC3, 0xA9, 0xFF}));
  EXPECT_EQ(tok.decode(ids), text);
  expect_error([&] { tok.decode({256}); }, {"id 256"});
}

// ---- datasets ------------------------------------------------------------------------------------

TEST_F(DataFiles, TextWithCharAndByteTokenizers) {
  std::string text;
  for (int i = 0; i < 10; ++i) text += "ab\xC3\xA9";  // "abé" x 10: 30 characters, 40 bytes
  const std::string file = write_bytes("corpus.txt", text);
  LoadedData chars = load_data({.path = file, .block_size = 2, .val_fraction = 0.2});
  EXPECT_EQ(chars.format, "text");
  ASSERT_TRUE(chars.tokenizer.has_value());
  EXPECT_EQ(chars.tokenizer->vocab_string(), "ab\xC3\xA9");
  ASSERT_EQ(chars.dataset.size(), 30);
  EXPECT_EQ(chars.dataset.tokens()[0], 0);
  EXPECT_EQ(chars.dataset.tokens()[1], 1);
  EXPECT_EQ(chars.dataset.tokens()[2], 2);
  EXPECT_EQ(chars.dataset.split_size(Split::train), 24);
  EXPECT_EQ(chars.dataset.split_size(Split::val), 6);

  LoadedData bytes = load_data({.path = file, .tokenizer = "byte", .block_size = 2, .val_fraction = 0.2});
  EXPECT_EQ(bytes.tokenizer->type(), "byte");
  ASSERT_EQ(bytes.dataset.size(), 40);
  EXPECT_EQ(bytes.dataset.tokens()[2], 0xC3);

  // Resume: the saved vocabulary encodes the text; one that lacks a character fails.
  LoadedData resumed = load_data({.path = file, .block_size = 2, .val_fraction = 0.2},
                                 Tokenizer::char_from_vocab("ab\xC3\xA9"));
  EXPECT_EQ(as_vector(resumed.dataset), as_vector(chars.dataset));
  expect_error(
      [&] { load_data({.path = file, .block_size = 2, .val_fraction = 0.2}, Tokenizer::char_from_vocab("ab")); },
      {"U+00E9"});
}

TEST_F(DataFiles, RawBinUint16AndUint32) {
  const std::vector<uint16_t> u16 = {5, 65535, 0, 7, 1, 2, 3, 4, 9, 8};
  LoadedData a = load_data({.path = write_raw("a.bin", u16), .block_size = 3, .val_fraction = 0.5});
  EXPECT_EQ(a.format, "bin");
  EXPECT_FALSE(a.tokenizer.has_value());
  EXPECT_EQ(as_vector(a.dataset), (std::vector<int32_t>{5, 65535, 0, 7, 1, 2, 3, 4, 9, 8}));

  const std::vector<uint32_t> u32 = {70000, 1, 2, 3, 4, 5, 6, 100000};
  EXPECT_EQ(read_bin_tokens(write_raw("b.bin", u32), "uint32"),
            (std::vector<int32_t>{70000, 1, 2, 3, 4, 5, 6, 100000}));
  // The same bytes read as uint16 give twice as many (little-endian halves) tokens.
  EXPECT_EQ(read_bin_tokens(path("b.bin"), "uint16").size(), 16u);

  const std::string odd = write_bytes("odd.bin", std::string(7, '\0'));
  expect_error([&] { read_bin_tokens(odd, "uint16"); }, {"7 bytes"});
  expect_error([&] { read_bin_tokens(path("b.bin"), "int8"); }, {"data.bin_dtype"});
  const std::vector<uint32_t> huge = {3000000000u};
  expect_error([&] { read_bin_tokens(write_raw("huge.bin", huge), "uint32"); }, {"3000000000 at offset 0"});
}

TEST_F(DataFiles, LlmcHeaderedBin) {
  const std::vector<uint16_t> u16 = {10, 11, 12, 13, 14};
  EXPECT_EQ(read_bin_tokens(write_llmc("v1.bin", u16, 1, 5), "uint32"), (std::vector<int32_t>{10, 11, 12, 13, 14}))
      << "the header's version decides the width, not bin_dtype";
  const std::vector<uint32_t> u32 = {1u << 20, 3, 4};
  EXPECT_EQ(read_bin_tokens(write_llmc("v2.bin", u32, 2, 3), "uint16"), (std::vector<int32_t>{1 << 20, 3, 4}));
  expect_error([&] { read_bin_tokens(write_llmc("bad_count.bin", u16, 1, 6), "uint16"); }, {"header says 6 tokens"});
  expect_error([&] { read_bin_tokens(write_llmc("bad_version.bin", u16, 3, 5), "uint16"); }, {"version 3"});
  // Format detection by content when the extension says nothing.
  write_llmc("tokens.dat", u16, 1, 5);
  EXPECT_EQ(resolve_format(path("tokens.dat"), "auto"), "bin");
}

TEST_F(DataFiles, Hdf5Datasets) {
  const std::vector<int32_t> ids = {4, 0, 3, 2, 1, 4, 4, 0, 1, 2};
  const std::string file = write_h5("t.h5", "tokens", ids, H5T_STD_I32LE, H5T_NATIVE_INT32);
  LoadedData loaded = load_data({.path = file, .block_size = 3, .val_fraction = 0.4});
  EXPECT_EQ(loaded.format, "h5");
  EXPECT_EQ(as_vector(loaded.dataset), ids);

  const std::vector<uint16_t> u16 = {60000, 1, 2};
  write_h5("u.hdf", "train_ids", u16, H5T_STD_U16LE, H5T_NATIVE_UINT16);
  EXPECT_EQ(resolve_format(path("u.hdf"), "auto"), "h5");
  EXPECT_EQ(read_h5_tokens(path("u.hdf"), "train_ids"), (std::vector<int32_t>{60000, 1, 2}));
  expect_error([&] { read_h5_tokens(path("u.hdf"), "tokens"); }, {"no dataset 'tokens'"});

  const std::vector<float> floats = {1.0f, 2.0f};
  write_h5("f.h5", "tokens", floats, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT);
  expect_error([&] { read_h5_tokens(path("f.h5"), "tokens"); }, {"integer"});
  const std::vector<int32_t> negative = {1, -5};
  write_h5("n.h5", "tokens", negative, H5T_STD_I32LE, H5T_NATIVE_INT32);
  expect_error([&] { read_h5_tokens(path("n.h5"), "tokens"); }, {"-5 at offset 1"});
  write_bytes("fake.h5", "not hdf5 at all");
  expect_error([&] { read_h5_tokens(path("fake.h5"), "tokens"); }, {"not an HDF5 file"});
}

TEST_F(DataFiles, IdAboveVocabNamesIdAndOffset) {
  std::vector<uint16_t> ids(60, 3);
  ids[37] = 150;
  const std::string file = write_raw("v.bin", ids);
  expect_error([&] { load_data({.path = file, .block_size = 4, .vocab_size = 100}); },
               {"token id 150 at offset 37", "vocab_size 100", file});
  EXPECT_EQ(load_data({.path = file, .block_size = 4, .vocab_size = 151}).dataset.max_id(), 150);
}

TEST_F(DataFiles, VocabularyFromTheDataIsBounded) {
  std::vector<uint32_t> ids(40, 7);
  ids[23] = 5'000'000;  // a 5M-row embedding (2.5 GB at d_model 128) if the data decided
  const std::string file = write_raw("big.bin", ids);
  expect_error([&] { load_data({.path = file, .bin_dtype = "uint32", .block_size = 4}); },
               {file, "token id 5000000 at offset 23 is not below 1048576", "set model.vocab_size for more",
                "data.bin_dtype (read as uint32"});
  // The same file is valid data with an explicit vocabulary that holds its ids.
  EXPECT_EQ(load_data({.path = file, .bin_dtype = "uint32", .block_size = 2, .vocab_size = 5'000'001})
                .dataset.max_id(),
            5'000'000);
  // uint16 ids read as uint32: pairs of ids become one id far above any vocabulary.
  const std::vector<uint16_t> u16 = {300, 12, 40000, 5, 9, 1000, 77, 3, 2, 1, 8, 6};
  const std::string pairs = write_raw("pairs.bin", u16);
  expect_error([&] { load_data({.path = pairs, .bin_dtype = "uint32", .block_size = 2}); },
               {pairs, "token id 65536009 at offset 2"});  // 9 + 1000 * 65536
  EXPECT_EQ(load_data({.path = pairs, .bin_dtype = "uint16", .block_size = 2, .val_fraction = 0.5}).dataset.max_id(),
            40000);
  // Below the bound the data decide.
  ids[23] = kMaxDataVocabSize - 1;
  EXPECT_EQ(load_data({.path = write_raw("edge.bin", ids), .bin_dtype = "uint32", .block_size = 2}).dataset.max_id(),
            kMaxDataVocabSize - 1);
}

TEST_F(DataFiles, ModelVocabSizeIsBoundedBySchema) {
  expect_error<ConfigError>([] { parse_config("model:\n  vocab_size: 16777217\ndata:\n  path: x.bin\n", "big.yaml"); },
                            {"model.vocab_size", "expected an int in [0, 16777216], got 16777217"});
  EXPECT_EQ(parse_config("model:\n  vocab_size: 16777216\ndata:\n  path: x.bin\n", "ok.yaml").model.vocab_size,
            kMaxVocabSize);
}

TEST_F(DataFiles, Hdf5OrTextReadAsBinIsAnErrorNamingTheFormat) {
  const std::vector<int32_t> small = {1, 2, 3, 4, 5, 6};
  const std::string h5 = write_h5("tokens.bin", "tokens", small, H5T_STD_I32LE, H5T_NATIVE_INT32);
  for (const std::string format : {"auto", "bin"})
    expect_error([&] { load_data({.path = h5, .format = format, .block_size = 2}); },
                 {h5, "starts with the HDF5 signature", "data.format: h5"});

  std::string text;
  for (int i = 0; i < 400; ++i) text += "To be, or not to be, that is the question: caf\xc3\xa9\n";
  const std::string txt = write_bytes("corpus.bin", text);
  expect_error([&] { load_data({.path = txt, .format = "bin", .block_size = 2}); },
               {txt, "looks like text", "first 4096 bytes", "\"To be, or not to be", "data.format: text"});
  // Text in its first 4 KB is enough, a UTF-8 character cut by the probe's end included.
  const std::string cut = std::string(4095, 'a') + "\xc3\xa9" + std::string(9, '\0');
  expect_error([&] { read_bin_tokens(write_bytes("cut.bin", cut), "uint16"); }, {"looks like text"});
  // One byte that text never has (NUL, a stray continuation byte) within the probe: tokens.
  std::string ids = text.substr(0, 4000);
  ids[3000] = '\0';
  EXPECT_EQ(read_bin_tokens(write_bytes("ids.bin", ids), "uint16").size(), 2000u);
  ids[3000] = '\x80';
  EXPECT_EQ(read_bin_tokens(write_bytes("ids2.bin", ids), "uint16").size(), 2000u);
}

TEST_F(DataFiles, DamagedLlmcHeaderIsAnErrorNotRawTokens) {
  const std::vector<uint16_t> u16 = {10, 11, 12, 13, 14};
  auto header_with = [&](const std::string& name, int32_t magic, int32_t version, int32_t count) {
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    return write_raw(name, u16, std::string(reinterpret_cast<const char*>(header.data()), 1024));
  };
  // One flipped bit in the magic; a zeroed magic beside a version and count that fit the file.
  const std::string flipped = header_with("flipped.bin", kLlmcMagic ^ 0x100, 1, 5);
  expect_error([&] { read_bin_tokens(flipped, "uint16"); },
               {flipped, "a damaged llm.c header: magic " + std::to_string(kLlmcMagic ^ 0x100), "expected 20240520"});
  const std::string zeroed = header_with("zeroed.bin", 0, 1, 5);
  expect_error([&] { read_bin_tokens(zeroed, "uint16"); }, {zeroed, "damaged llm.c header: magic 0"});
  expect_error([&] { load_data({.path = zeroed, .block_size = 2}); }, {zeroed, "damaged llm.c header"});
  // Right magic, wrong version or count: the header's own errors.
  expect_error([&] { read_bin_tokens(header_with("v7.bin", kLlmcMagic, 7, 5), "uint16"); }, {"llm.c header version 7"});
  // Neither the magic nor the layout: raw tokens (517 uint16 ids, 512 of them from the 1024 bytes).
  EXPECT_EQ(read_bin_tokens(header_with("raw.bin", 0x00030001, 1, 9), "uint16").size(), 517u);
}

TEST_F(DataFiles, FifoIsRefusedWithoutOpening) {
  const std::string fifo = path("tokens.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error([&] { load_data({.path = fifo, .block_size = 2}); }, {fifo, "is a FIFO, expected a regular file"});
  // Without an extension the format is sniffed from the first bytes: still never opened.
  const std::string bare = path("tokens");
  ASSERT_EQ(::mkfifo(bare.c_str(), 0600), 0);
  expect_error([&] { load_data({.path = bare, .block_size = 2}); }, {bare, "is a FIFO, expected a regular file"});
  expect_error<ConfigError>([&] { load_config(bare); }, {bare, "is a FIFO, expected a YAML file"});
}

TEST_F(DataFiles, NulInTextForTheCharTokenizerIsAnErrorBeforeTraining) {
  // uint16 token ids in a file without an extension sniff as text; its NULs would fail only the
  // first checkpoint save (a char vocabulary is stored as a C string).
  const std::string file = path("tokens.dat");
  std::ofstream(file, std::ios::binary) << std::string("ab\0cd\0ef", 8) + std::string(40, 'x');
  expect_error([&] { load_data({.path = file, .block_size = 2}); },
               {file, "NUL byte at offset 2", "data.format: bin", "data.tokenizer: byte"});
  EXPECT_EQ(load_data({.path = file, .tokenizer = "byte", .block_size = 2}).dataset.max_id(), 'x');
}

TEST_F(DataFiles, MissingFileNamesPath) {
  for (const std::string name : {"missing.txt", "missing.bin", "missing.h5", "missing"}) {
    expect_error([&] { load_data({.path = path(name)}); }, {path(name), "No such file"});
  }
  expect_error([&] { load_data({.path = path("x.bin"), .format = "csv"}); }, {"data.format"});
}

// ---- split --------------------------------------------------------------------------------------

TEST(DatasetSplit, PositionsAsNanoGpt) {
  Dataset d(iota_tokens(100), 0.1, 8);
  EXPECT_EQ(d.split_begin(Split::train), 0);
  EXPECT_EQ(d.split_size(Split::train), 90);
  EXPECT_EQ(d.split_begin(Split::val), 90);
  EXPECT_EQ(d.split_size(Split::val), 10);
  EXPECT_EQ(d.split_data(Split::val)[0], 90);
  // tiny Shakespeare (1,115,394 characters): nanoGPT's train.bin holds int(n * 0.9) = 1,003,854.
  Dataset shakespeare(std::vector<int32_t>(1115394, 0), 0.1, 256);
  EXPECT_EQ(shakespeare.split_size(Split::train), 1003854);
  EXPECT_EQ(shakespeare.split_size(Split::val), 111540);
}

TEST(DatasetSplit, ShortSplitsAreErrors) {
  expect_error([] { Dataset(iota_tokens(100), 0.1, 10); }, {"val split has 10 tokens", "block_size + 1 = 11"});
  const Dataset just_long_enough(iota_tokens(100), 0.1, 9);  // val: 10 tokens = block_size + 1
  EXPECT_EQ(just_long_enough.split_size(Split::train), 90);
  EXPECT_EQ(just_long_enough.split_size(Split::val), 10);
  expect_error([] { Dataset(iota_tokens(100), 0.0, 4); }, {"data.val_fraction"});
  expect_error([] { Dataset(iota_tokens(100), 0.1, 0); }, {"data.block_size"});
}

// ---- loader ------------------------------------------------------------------------------------

TEST(BatchLoader, TargetsAreInputsShiftedByOne) {
  // Token at offset i is i, so a window's values are its offsets.
  Dataset d(iota_tokens(1000), 0.1, 16);
  BatchLoader loader(d, 1337);
  for (Split split : {Split::train, Split::val}) {
    Batch b = loader.batch(split, 5, 0, {0, 12});
    ASSERT_EQ(b.inputs.shape(), (Shape{12, 16}));
    ASSERT_EQ(b.targets.shape(), (Shape{12, 16}));
    EXPECT_EQ(b.inputs.dtype(), DType::i64);
    EXPECT_EQ(b.tokens, 12 * 16);
    std::vector<int64_t> x = b.inputs.to_vector<int64_t>(), y = b.targets.to_vector<int64_t>();
    for (int64_t r = 0; r < 12; ++r) {
      const int64_t start = x[r * 16];
      EXPECT_EQ(start, d.split_begin(split) + loader.window_start(split, 5, 0, r));
      EXPECT_GE(start, d.split_begin(split));
      EXPECT_LE(start + 16, d.split_begin(split) + d.split_size(split) - 1) << "window inside its split";
      for (int64_t t = 0; t < 16; ++t) {
        EXPECT_EQ(x[r * 16 + t], start + t);
        EXPECT_EQ(y[r * 16 + t], start + t + 1);
      }
    }
  }
}

TEST(BatchLoader, BatchIsAPureFunctionOfSeedAndStep) {
  Dataset d(iota_tokens(5000), 0.1, 8);
  BatchLoader loader(d, 42), same_seed(d, 42), other_seed(d, 43);
  auto rows_of = [](const Batch& b) { return b.inputs.to_vector<int64_t>(); };
  const auto step7 = rows_of(loader.train_batch(7, 1, 6));
  rows_of(loader.train_batch(3, 0, 6));  // history does not matter
  EXPECT_EQ(rows_of(loader.train_batch(7, 1, 6)), step7);
  EXPECT_EQ(rows_of(same_seed.train_batch(7, 1, 6)), step7);
  EXPECT_NE(rows_of(loader.train_batch(8, 1, 6)), step7);
  EXPECT_NE(rows_of(loader.train_batch(7, 0, 6)), step7);
  EXPECT_NE(rows_of(other_seed.train_batch(7, 1, 6)), step7);
  EXPECT_EQ(rows_of(loader.eval_batch(2, 6)), rows_of(same_seed.eval_batch(2, 6)));
  EXPECT_NE(rows_of(loader.eval_batch(2, 6)), rows_of(loader.eval_batch(3, 6)));
}

TEST(BatchLoader, CoversEveryStartUniformly) {
  // Train split of 30 tokens, T = 4: starts 0..25, 26 of them. 26,000 draws.
  Dataset d(iota_tokens(40), 0.25, 4);
  ASSERT_EQ(d.split_size(Split::train), 30);
  BatchLoader loader(d, 1);
  std::vector<int64_t> counts(26, 0);
  for (int64_t step = 0; step < 1000; ++step)
    for (int64_t row = 0; row < 26; ++row) ++counts.at(loader.window_start(Split::train, step, 0, row));
  for (int64_t s = 0; s < 26; ++s) {
    EXPECT_GT(counts[s], 800) << "start " << s;
    EXPECT_LT(counts[s], 1200) << "start " << s;
  }
}

TEST(BatchLoader, RankSharesConcatenateToTheGlobalBatch) {
  Dataset d(iota_tokens(3000), 0.1, 8);
  BatchLoader loader(d, 5);
  const Batch full = loader.batch(Split::train, 11, 2, {0, 12});
  for (int world : {1, 2, 3, 4, 6}) {
    std::vector<int64_t> inputs, targets;
    for (int rank = 0; rank < world; ++rank) {
      RowRange rows = rank_rows(12, rank, world);
      EXPECT_EQ(rows.end - rows.begin, 12 / world);
      Batch share = loader.batch(Split::train, 11, 2, rows);
      for (int64_t v : share.inputs.to_vector<int64_t>()) inputs.push_back(v);
      for (int64_t v : share.targets.to_vector<int64_t>()) targets.push_back(v);
    }
    EXPECT_EQ(inputs, full.inputs.to_vector<int64_t>()) << world << " ranks";
    EXPECT_EQ(targets, full.targets.to_vector<int64_t>()) << world << " ranks";
  }
  expect_error([] { rank_rows(10, 0, 4); }, {"train.batch_size 10"});
  expect_error([] { rank_rows(12, 4, 4); }, {"rank 4"});
}

TEST(SequentialEval, CoversTheValSplitOnce) {
  // 250 tokens, val = the last 50 (offsets 200..249): 49 targets, T = 8 -> 7 windows, the
  // last with 1 real target; batch size 3 -> batches of 3, 3, 1 windows.
  Dataset d(iota_tokens(250), 0.2, 8);
  SequentialEval eval(d, 3);
  EXPECT_EQ(eval.num_targets(), 49);
  EXPECT_EQ(eval.num_windows(), 7);
  ASSERT_EQ(eval.num_batches(), 3);
  std::vector<int64_t> seen_targets;
  int64_t counted = 0;
  for (int64_t i = 0; i < eval.num_batches(); ++i) {
    Batch b = eval.batch(i);
    EXPECT_EQ(b.inputs.size(0), i < 2 ? 3 : 1);
    counted += b.tokens;
    std::vector<int64_t> x = b.inputs.to_vector<int64_t>(), y = b.targets.to_vector<int64_t>();
    for (size_t j = 0; j < y.size(); ++j) {
      if (y[j] == kIgnoreIndex) continue;
      EXPECT_EQ(y[j], x[j] + 1);
      seen_targets.push_back(y[j]);
    }
  }
  EXPECT_EQ(counted, 49);
  std::vector<int64_t> expected;
  for (int64_t i = 201; i < 250; ++i) expected.push_back(i);
  EXPECT_EQ(seen_targets, expected) << "every val token after the first is a target exactly once, in order";
  Batch last = eval.batch(2);
  EXPECT_EQ(last.targets.to_vector<int64_t>()[0], 249);
  EXPECT_EQ(last.targets.to_vector<int64_t>()[1], kIgnoreIndex);
  expect_error([&] { eval.batch(3); }, {"index 3"});
}

}  // namespace
}  // namespace lat
