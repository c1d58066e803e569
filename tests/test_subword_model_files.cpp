// Subword tokenizers in model files (train/files/tokenizer_files.h): a checkpoint's
// /tokenizer/file, lat's export (tokenizer.model beside model.safetensors) and the Hugging Face
// export keep the tokenizer file byte for byte, so that every form reads back the same ids; a
// damaged /tokenizer/file is named; fine-tuning takes the checkpoint's tokenizer only from a
// data.tokenizer file with the same bytes; lat info names the tokenizer. The SentencePiece model
// is trained here with libsentencepiece's own trainer.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/sentencepiece_proto.h"
#include "data/sentencepiece_tokenizer.h"
#include "tests/expect_error.h"
#include "tests/hf_test_model.h"
#include "tests/test_files.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/export.h"
#include "train/files/hf_tokenizer.h"
#include "train/files/model_reader.h"
#include "train/files/tokenizer_files.h"
#include "train/inference/info.h"
#include "train/run/finetune.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

// Accents, CJK, an emoji (4 UTF-8 bytes), runs of spaces and newlines, digits.
const std::string kMultilingual = "café naïve 中文 🙂\n  two  spaces\n\n12345 the end\n";

/// A small text to train on: English lines and the multilingual sample, so every character of
/// kMultilingual is in the vocabulary.
std::string training_text() {
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\nthere and then, the other\n";
  return text + kMultilingual;
}

class SubwordModelFilesTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    const std::string corpus = write("corpus.txt", training_text());
    // identity normalization keeps the model small (no NFKC table); with the spaces kept and
    // bytes for what the vocabulary lacks (a newline), decode(encode(text)) == text.
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + corpus + " --model_prefix=" + path("sp") +
        " --vocab_size=320 --model_type=bpe --byte_fallback=true --remove_extra_whitespaces=false --character_coverage=1.0 --normalization_rule_name=identity"
        " --num_threads=1 --minloglevel=2");
    ASSERT_TRUE(status.ok()) << status.ToString();
    model_bytes_ = read_bytes(path("sp.model"));
    ASSERT_FALSE(model_bytes_.empty());
    tokenizer_ = lat::Tokenizer::subword(lat::sentencepiece_model(model_bytes_, path("sp.model")));
  }

  /// A checkpoint of a freshly initialized Qwen3.5-shaped model whose vocabulary is the
  /// SentencePiece model's, its tokenizer recorded; saved at dir_/name.
  lat::Checkpoint save(const std::string& name) const {
    const lat::Config cfg = model_config(kQwenShape);
    lat::Generator gen(1);
    lat::HybridLM model(lat::hybrid_lm_config(cfg.model, tokenizer_.vocab_size()), gen);
    lat::Checkpoint c;
    c.config_yaml = lat::to_yaml(cfg);
    lat::set_checkpoint_tokenizer(c, tokenizer_);
    for (const auto& [param, t] : model.named_parameters()) c.model.emplace_back(param, t.detach().clone());
    lat::save_checkpoint(path(name), c);
    return c;
  }

  /// Expects `tokenizer` to be this test's SentencePiece model: same file, same ids.
  void expect_same_tokenizer(const std::optional<lat::Tokenizer>& tokenizer) const {
    ASSERT_TRUE(tokenizer.has_value());
    EXPECT_EQ(tokenizer->type(), "sentencepiece");
    ASSERT_NE(tokenizer->subword_model(), nullptr);
    EXPECT_EQ(tokenizer->subword_model()->file_contents(), model_bytes_);
    EXPECT_EQ(tokenizer->encode(kMultilingual), tokenizer_.encode(kMultilingual));
    EXPECT_EQ(tokenizer->decode(tokenizer_.encode(kMultilingual)), kMultilingual);
  }

  /// Overwrites the data of the checkpoint's /tokenizer/file with `bytes` of the same size,
  /// leaving its crc32 attribute as it was.
  void overwrite_tokenizer_file(const std::string& file, const std::string& bytes) const {
    const hid_t h5 = H5Fopen(path(file).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(h5, 0);
    const hid_t dataset = H5Dopen2(h5, "/tokenizer/file", H5P_DEFAULT);
    ASSERT_GE(dataset, 0);
    ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), 0);
    H5Dclose(dataset);
    H5Fclose(h5);
  }

  /// Replaces the checkpoint's /tokenizer/file by a dataset of `type` holding `bytes`.
  void rewrite_tokenizer_file(const std::string& file, hid_t type, const std::string& bytes) const {
    const hid_t h5 = H5Fopen(path(file).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(h5, 0);
    ASSERT_GE(H5Ldelete(h5, "/tokenizer/file", H5P_DEFAULT), 0);
    const hsize_t n = bytes.size();
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t dataset = H5Dcreate2(h5, "/tokenizer/file", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(dataset, 0);
    ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), 0);
    H5Dclose(dataset);
    H5Sclose(space);
    H5Fclose(h5);
  }

  std::string model_bytes_;
  lat::Tokenizer tokenizer_ = lat::Tokenizer::byte();
};

TEST_F(SubwordModelFilesTest, CheckpointKeepsTheSentencePieceFileByteForByte) {
  save("model.h5");
  const lat::Checkpoint loaded = lat::load_checkpoint(path("model.h5"));
  EXPECT_EQ(loaded.tokenizer_type, "sentencepiece");
  EXPECT_EQ(loaded.tokenizer_file, model_bytes_);
  EXPECT_EQ(loaded.tokenizer_vocab, "");
  expect_same_tokenizer(lat::checkpoint_tokenizer(loaded));
  // lat tokenizer reads only the root and /tokenizer.
  EXPECT_EQ(lat::load_checkpoint(path("model.h5"), lat::CheckpointParts::tokenizer_only).tokenizer_file, model_bytes_);
}

TEST_F(SubwordModelFilesTest, ExportWritesTheModelFileAndReadsItBack) {
  save("model.h5");
  fs::create_directories(path("out"));
  write("out/config.json", "{}");                      // an earlier export ...
  write("out/tokenizer.json", R"({"type": "byte"})");  // ... of a byte model: stale
  lat::export_model({path("model.h5"), "safetensors", path("out"), "f32", {}});
  EXPECT_EQ(read_bytes(path("out/tokenizer.model")), model_bytes_);
  EXPECT_FALSE(fs::exists(path("out/tokenizer.json")));
  const lat::ModelWeights w = lat::load_model_weights(path("out"));
  EXPECT_EQ(w.checkpoint.tokenizer_file, model_bytes_);
  expect_same_tokenizer(lat::checkpoint_tokenizer(w.checkpoint));

  lat::export_model({path("model.h5"), "h5-weights", path("h5"), "f32", {}});
  EXPECT_EQ(lat::load_checkpoint(path("h5/model.h5")).tokenizer_file, model_bytes_);
}

TEST_F(SubwordModelFilesTest, HfExportWritesTheModelFileAndATokenizerConfigForIt) {
  save("model.h5");
  lat::export_model({path("model.h5"), "hf", path("hf"), "f32", {}});
  EXPECT_EQ(read_bytes(path("hf/tokenizer.model")), model_bytes_);
  EXPECT_FALSE(fs::exists(path("hf/tokenizer.json")));
  const nlohmann::json config = nlohmann::json::parse(read_bytes(path("hf/tokenizer_config.json")));
  EXPECT_EQ(config["tokenizer_class"], "SentencePieceBackend");
  EXPECT_EQ(config["add_bos_token"], false);
  EXPECT_EQ(config["add_eos_token"], false);
  EXPECT_EQ(config["clean_up_tokenization_spaces"], false);
  const lat::ModelWeights w = lat::load_model_weights(path("hf"));
  expect_same_tokenizer(lat::checkpoint_tokenizer(w.checkpoint));
}

// The proto fields the other formats need, read from the fixture's .model (trained above with
// a dummy prefix, sentencepiece's default).
TEST_F(SubwordModelFilesTest, ProtoFieldsAreTheTrainersOptions) {
  const lat::SentencePieceProto proto = lat::read_sentencepiece_proto(model_bytes_);
  ASSERT_EQ(proto.pieces.size(), 320u);
  EXPECT_EQ(proto.pieces[0].piece, "<unk>");
  EXPECT_EQ(proto.pieces[0].type, 2);  // UNKNOWN
  EXPECT_EQ(proto.pieces[3].piece, "<0x00>");
  EXPECT_EQ(proto.pieces[3].type, 6);  // BYTE
  EXPECT_EQ(proto.model_type, lat::SentencePieceModelType::bpe);
  EXPECT_TRUE(proto.byte_fallback);
  EXPECT_EQ(proto.normalizer_name, "identity");
  EXPECT_FALSE(proto.precompiled_charsmap);
  EXPECT_TRUE(proto.add_dummy_prefix);
  EXPECT_FALSE(proto.remove_extra_whitespaces);
  EXPECT_TRUE(proto.escape_whitespaces);
  EXPECT_FALSE(lat::llama_tokenizer_reproduces(proto));
  lat::testing::expect_error([&] { lat::read_sentencepiece_proto(model_bytes_.substr(0, 40)); },
                             {"SentencePiece model: a field runs past the end"});
}

// A model as `lat tokenizer train` writes it (no dummy prefix) gets LlamaTokenizer, which
// decodes byte-fallback pieces to their bytes; SentencePieceBackend (the fixture's export
// above) would print "<0x0A>" for a newline.
TEST_F(SubwordModelFilesTest, HfExportOfALatTrainedModelNamesLlamaTokenizer) {
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + path("corpus.txt") + " --model_prefix=" + path("lat_like") +
      " --vocab_size=320 --model_type=bpe --byte_fallback=true --remove_extra_whitespaces=false"
      " --add_dummy_prefix=false --character_coverage=1.0 --normalization_rule_name=identity"
      " --num_threads=1 --minloglevel=2");
  ASSERT_TRUE(status.ok()) << status.ToString();
  const std::string bytes = read_bytes(path("lat_like.model"));
  EXPECT_TRUE(lat::llama_tokenizer_reproduces(lat::read_sentencepiece_proto(bytes)));
  const auto model = lat::sentencepiece_model(bytes, path("lat_like.model"));
  const nlohmann::ordered_json config = lat::hf_subword_tokenizer_config_json(*model);
  EXPECT_EQ(config, lat::sentencepiece_llama_tokenizer_config());
  EXPECT_EQ(config["tokenizer_class"], "LlamaTokenizer");
  EXPECT_EQ(config["legacy"], false);
  EXPECT_EQ(config["add_prefix_space"], false);
}

TEST_F(SubwordModelFilesTest, InfoNamesTheTokenizer) {
  save("model.h5");
  const std::string out = lat::format_info(lat::inspect(path("model.h5"), 16));
  EXPECT_TRUE(contains(out, "\n  tokenizer sentencepiece, " + std::to_string(tokenizer_.vocab_size()) +
                                " tokens (tokenizer.model)\n"))
      << out;
}

TEST_F(SubwordModelFilesTest, DamagedTokenizerFileIsNamedWithTheCheckpoint) {
  save("model.h5");
  std::string flipped = model_bytes_;
  flipped[flipped.size() / 2] ^= 0x01;
  overwrite_tokenizer_file("model.h5", flipped);
  expect_error([&] { lat::load_checkpoint(path("model.h5")); },
               {"load_checkpoint: '" + path("model.h5") + "'", "/tokenizer/file", "checksum"});

  save("text.h5");
  rewrite_tokenizer_file("text.h5", H5T_STD_I32LE, model_bytes_);
  expect_error([&] { lat::load_checkpoint(path("text.h5")); },
               {"load_checkpoint: '" + path("text.h5") + "'", "/tokenizer/file: expected a uint8 dataset"});
}

TEST_F(SubwordModelFilesTest, TokenizerFileLargerThanTheReadersBoundIsRefusedBeforeReading) {
  save("model.h5");
  // A deflated run of zeros: a small file whose header claims 1 byte more than
  // kMaxSentencePieceModelBytes.
  const hid_t h5 = H5Fopen(path("model.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(h5, 0);
  ASSERT_GE(H5Ldelete(h5, "/tokenizer/file", H5P_DEFAULT), 0);
  const hsize_t n = lat::kMaxSentencePieceModelBytes + 1, chunk = 1 << 20;
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &chunk);
  H5Pset_deflate(dcpl, 9);
  const hid_t dataset = H5Dcreate2(h5, "/tokenizer/file", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(dataset, 0);
  const std::vector<uint8_t> zeros(n, 0);
  ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()), 0);
  H5Dclose(dataset);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(h5);
  expect_error([&] { lat::load_checkpoint(path("model.h5")); },
               {"load_checkpoint: '" + path("model.h5") + "'",
                "/tokenizer/file: " + std::to_string(n) + " bytes, more than the " +
                    std::to_string(lat::kMaxSentencePieceModelBytes) + " lat reads"});
}

TEST_F(SubwordModelFilesTest, FineTuningKeepsTheTokenizerOnlyForTheSameFile) {
  const lat::Checkpoint init = save("model.h5");
  lat::DataConfig data;
  data.path = write("new.txt", "the other fox\n");
  data.format = "text";
  data.tokenizer = path("sp.model");
  expect_same_tokenizer(lat::finetune_tokenizer(init, data, true));

  data.tokenizer = "char";
  expect_error<lat::ConfigError>([&] { lat::finetune_tokenizer(init, data, true); },
                                 {"init_from: the checkpoint's tokenizer is sentencepiece", "data.tokenizer is 'char'",
                                  "init_from_strict: false"});
  EXPECT_FALSE(lat::finetune_tokenizer(init, data, false).has_value());

  write("copy.model", model_bytes_);  // the same bytes under another name: the same tokenizer
  data.tokenizer = path("copy.model");
  expect_same_tokenizer(lat::finetune_tokenizer(init, data, true));

  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + path("corpus.txt") + " --model_prefix=" + path("other") +
      " --vocab_size=310 --model_type=bpe --byte_fallback=true"
      " --character_coverage=1.0 --normalization_rule_name=identity"
      " --num_threads=1 --minloglevel=2");
  ASSERT_TRUE(status.ok()) << status.ToString();
  data.tokenizer = path("other.model");
  expect_error<lat::ConfigError>([&] { lat::finetune_tokenizer(init, data, true); },
                                 {"data.tokenizer is '" + path("other.model") + "'", "a different tokenizer",
                                  "its ids would mean other tokens"});
}

}  // namespace
