// Training, evaluating and generating with a subword tokenizer (data.tokenizer: PATH), with a
// SentencePiece model trained in the test: `lat train` through build/lat (the token cache
// written, reused on resume, rebuilt when the text changes; bad paths refused before the run
// directory exists), `lat eval`'s bits per byte against the loss and the byte count computed
// here, `lat generate`'s streamed text against the decoded ids; and TextStream itself.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/sentencepiece_tokenizer.h"
#include "data/token_cache.h"
#include "lat/ops.h"
#include "lat_command.h"
#include "sentencepiece_testing.h"
#include "test_files.h"
#include "train/files/trained_model.h"
#include "train/inference/generate.h"
#include "train/inference/text_stream.h"

namespace {

namespace fs = std::filesystem;
using lat::Tokenizer;
using lat::testing::contains;
using lat::testing::read_bytes;
using lat::testing::run_lat_captured;
using lat::testing::TempDirTest;

TEST(TextStream, SettledLengthHoldsBackAPartialCharacterAndReplacementCharacters) {
  EXPECT_EQ(lat::settled_length("ab"), 2u);
  EXPECT_EQ(lat::settled_length("ab\xE3\x81"), 2u);          // 2 of the 3 bytes of U+3042
  EXPECT_EQ(lat::settled_length("ab\xE3\x81\x82"), 5u);      // U+3042 whole
  EXPECT_EQ(lat::settled_length("\xF0\x9F\x98"), 0u);         // 3 of the 4 bytes of U+1F600
  EXPECT_EQ(lat::settled_length("a\xC3"), 1u);
  EXPECT_EQ(lat::settled_length("ab\xEF\xBF\xBD\xEF\xBF\xBD"), 2u);  // a decoder's U+FFFD for partial bytes
  EXPECT_EQ(lat::settled_length("ab\xEF\xBF\xBD" "c"), 6u);
  EXPECT_EQ(lat::settled_length(""), 0u);
}

using TextStreamFiles = TempDirTest;

// A model trained without CJK and emoji spells them in byte-fallback tokens, one byte each:
// the stream prints each character once it is whole, and the pieces make the decoded text.
TEST_F(TextStreamFiles, PrintsWholeCharactersThatMakeTheDecodedText) {
  std::string english;
  for (int i = 0; i < 100; ++i) english += "First Citizen: Before we proceed any further, hear me speak " + std::to_string(i) + "\n";
  const std::string model_path = lat::testing::train_sentencepiece(write("english.txt", english), path("sp"), 300);
  const Tokenizer sp = Tokenizer::subword(lat::sentencepiece_model(read_bytes(model_path), model_path));
  const std::string text = "Speak \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 caf\xC3\xA9!";
  const std::vector<int64_t> ids = sp.encode(text);
  ASSERT_EQ(sp.decode(ids), text);
  const std::vector<int64_t> prompt(ids.begin(), ids.begin() + 2);
  lat::TextStream stream(sp, prompt);
  EXPECT_EQ(stream.printed_prompt(), sp.decode(prompt));
  std::string printed = stream.printed_prompt();
  int empty_pushes = 0;
  for (size_t i = 2; i < ids.size(); ++i) {
    const std::string piece = stream.push(ids[i]);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "a partial character printed at id " << i;
    EXPECT_EQ(lat::settled_length(piece), piece.size()) << "a partial character printed at id " << i;
    empty_pushes += piece.empty();
    printed += piece;
  }
  printed += stream.finish();
  EXPECT_EQ(printed, text);
  EXPECT_GE(empty_pushes, 5);  // bytes of U+65E5, U+672C and U+1F600 waited for the rest
}

class SubwordTraining : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    corpus_ = write("corpus.txt", lat::testing::multilingual_lines(400));
    model_path_ = lat::testing::train_sentencepiece(corpus_, path("sp"), 400);
    tokenizer_ = Tokenizer::subword(lat::sentencepiece_model(read_bytes(model_path_), model_path_));
    write("run.yaml", "model: {d_model: 32, n_layers: 2, n_heads: 2, layers: \"gdn,attn\"}\n"
                      "data: {path: '" + corpus_ + "', tokenizer: '" + model_path_ + "', block_size: 32}\n"
                      "train: {batch_size: 4, max_steps: 4, warmup: 1, eval_every: 0, log_every: 2, ckpt_every: 2,"
                      " out_dir: '" + path("run") + "', threads: 1}\n");
    fs::create_directories(path("capture"));
  }

  lat::testing::CliResult lat(const std::string& args) { return run_lat_captured(args, path("capture")); }

  /// The run directory's token caches.
  std::vector<std::string> caches() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(path("run")))
      if (entry.path().filename().string().rfind("tokens-", 0) == 0) names.push_back(entry.path().filename().string());
    return names;
  }

  std::string corpus_, model_path_;
  std::optional<Tokenizer> tokenizer_;
};

TEST_F(SubwordTraining, TrainWritesTheTokenCacheAndResumeReusesIt) {
  const auto trained = lat("train " + path("run.yaml"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::vector<int64_t> ids = tokenizer_->encode(read_bytes(corpus_));
  const std::string name = lat::TokenCacheKey::of(read_bytes(corpus_), *tokenizer_).file_name();
  EXPECT_TRUE(contains(trained.out + trained.err, "token cache: wrote " + path("run") + "/" + name + " (" +
                                                      std::to_string(ids.size()) + " tokens)"))
      << trained.out << trained.err;
  EXPECT_TRUE(contains(trained.out + trained.err, "sentencepiece tokenizer, vocab 400"));
  // val_loss / ln 2 of a subword run is bits per token, never labelled bits per character.
  EXPECT_TRUE(contains(trained.err, " bits per token, ")) << trained.err;
  EXPECT_FALSE(contains(trained.err, " bpc")) << trained.err;
  ASSERT_EQ(caches(), std::vector<std::string>{name});
  const auto written = fs::last_write_time(path("run") + "/" + name);

  // Resumed: the ids come from the cache, which stays as it was.
  const auto resumed = lat("train " + path("run.yaml") + " --set train.max_steps=6");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.out + resumed.err, "token cache: read " + std::to_string(ids.size()) + " tokens from " +
                                                      path("run") + "/" + name))
      << resumed.out << resumed.err;
  EXPECT_EQ(fs::last_write_time(path("run") + "/" + name), written);

  // The text changes: encoded again, the old cache replaced.
  write("corpus.txt", lat::testing::multilingual_lines(420));
  const std::string new_name = lat::TokenCacheKey::of(read_bytes(corpus_), *tokenizer_).file_name();
  const auto changed = lat("train " + path("run.yaml") + " --set train.max_steps=8");
  ASSERT_EQ(changed.exit_code, 0) << changed.err;
  EXPECT_TRUE(contains(changed.out + changed.err, "token cache: " + path("run") + "/" + name +
                                                      " is for other text or another tokenizer: encoded the text again"))
      << changed.out << changed.err;
  EXPECT_EQ(caches(), std::vector<std::string>{new_name});
}

// lat eval: bits per byte = the summed loss over ln 2 and the UTF-8 bytes of the val targets'
// text, here decoded from the ids of the split (n_train = floor(0.9 n), targets after its first).
TEST_F(SubwordTraining, EvalReportsBitsPerByteOfTheValTargetsText) {
  ASSERT_EQ(lat("train " + path("run.yaml")).exit_code, 0);
  const auto eval = lat("eval --checkpoint " + path("run") + " --threads 1");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const nlohmann::json j = nlohmann::json::parse(eval.out);
  const std::vector<int64_t> ids = tokenizer_->encode(read_bytes(corpus_));
  const size_t n_train = static_cast<size_t>(static_cast<double>(ids.size()) * 0.9);
  const std::vector<int64_t> targets(ids.begin() + static_cast<int64_t>(n_train) + 1, ids.end());
  const int64_t bytes = static_cast<int64_t>(tokenizer_->decode(targets).size());
  EXPECT_EQ(j["tokens"].get<int64_t>(), static_cast<int64_t>(targets.size()));
  EXPECT_EQ(j["text_bytes"].get<int64_t>(), bytes);
  const double loss = j["val_loss"].get<double>();
  EXPECT_NEAR(j["val_bpb"].get<double>(),
              loss * static_cast<double>(targets.size()) / (std::numbers::ln2 * static_cast<double>(bytes)), 1e-12);
  EXPECT_DOUBLE_EQ(j["val_bpc"].get<double>(), loss / std::numbers::ln2);
  // The final eval's metrics record carries the same measure.
  std::istringstream metrics(read_bytes(path("run") + "/metrics.jsonl"));
  nlohmann::json last;
  for (std::string line; std::getline(metrics, line);) last = nlohmann::json::parse(line);
  EXPECT_EQ(last["whole_split"], true);
  EXPECT_NEAR(last["val_bpb"].get<double>(), j["val_bpb"].get<double>(), 1e-6);

  // eval reads the run's token cache: one holding the first 4000 ids (whole and for this text
  // and tokenizer) shows in the targets scored.
  const lat::TokenCacheKey key = lat::TokenCacheKey::of(read_bytes(corpus_), *tokenizer_);
  {
    std::ofstream out(path("run") + "/" + key.file_name(), std::ios::binary);
    lat::write_token_cache(out, key, std::vector<int32_t>(ids.begin(), ids.begin() + 4000));
  }
  const auto cached = lat("eval --checkpoint " + path("run") + " --threads 1");
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  EXPECT_EQ(nlohmann::json::parse(cached.out)["tokens"].get<int64_t>(), 4000 - 3600 - 1);
}

// lat generate --prompt: the prompt's text, then the continuation, which is the decoding of the
// prompt's ids and the drawn ids (greedy: the same ids generate_tokens draws).
TEST_F(SubwordTraining, GenerateStreamsTheDecodedTextOfPromptAndContinuation) {
  ASSERT_EQ(lat("train " + path("run.yaml")).exit_code, 0);
  const std::string prompt = "Caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC";
  lat::GenerateOptions options;
  options.checkpoint = path("run");
  options.prompt = prompt;
  options.max_new_tokens = 24;
  options.sampling.temperature = 0;
  options.threads = 1;
  std::ostringstream out;
  lat::generate(options, out);

  const lat::TrainedModel trained = lat::load_trained_model(path("run"));
  const std::vector<int64_t> prompt_ids = tokenizer_->encode(prompt);
  lat::Generator gen(0);
  lat::SamplingOptions greedy;
  greedy.temperature = 0;
  greedy.drawable_ids = tokenizer_->vocab_size();
  std::vector<int64_t> all = prompt_ids;
  for (int64_t id : lat::generate_tokens(*trained.model, prompt_ids, 24, greedy, gen)) all.push_back(id);
  EXPECT_EQ(out.str(), tokenizer_->decode(all) + "\n");
  EXPECT_EQ(out.str().rfind(prompt, 0), 0u);

  // The same through build/lat.
  const auto cli = lat("generate --checkpoint " + path("run") + " --prompt '" + prompt +
                       "' --max-new-tokens 24 --temperature 0 --threads 1");
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(cli.out, out.str());
}

// A data.tokenizer that is no tokenizer: one line naming the key and the path, exit 2, and no
// run directory.
TEST_F(SubwordTraining, ABadTokenizerPathIsAConfigErrorBeforeTheRunDirectoryExists) {
  struct Case {
    std::string value, message;
  };
  fs::create_directories(path("empty"));
  write("junk.model", "not a model");
  const std::vector<Case> cases = {
      {path("missing.model"), "error: data.tokenizer: no such file or directory: '" + path("missing.model") +
                                  "' (expected char, byte or the path of a tokenizer.json, a SentencePiece .model or a "
                                  "directory holding one) (--set data.tokenizer)\n"},
      {path("empty"), "error: data.tokenizer: '" + path("empty") +
                          "': a directory with neither a tokenizer.json nor a tokenizer.model\n"},
      {corpus_, "error: data.tokenizer: '" + corpus_ + "' is not valid JSON: parse error at line 1"},
      {path("junk.model"), "error: data.tokenizer: '" + path("junk.model") +
                               "': not a SentencePiece model sentencepiece loads"},
  };
  for (const Case& c : cases) {
    const auto r = lat("train " + path("run.yaml") + " --set data.tokenizer=" + c.value);
    EXPECT_EQ(r.exit_code, 2) << c.value;
    EXPECT_EQ(r.err.rfind(c.message, 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(path("run"))) << c.value;
  }
}

}  // namespace
