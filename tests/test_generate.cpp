// Generation: token sampling (temperature, top-k, top-p) against the distributions they
// define, greedy decoding against the full forward pass, and `lat generate` on a checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "lat/lat.h"
#include "layers/hybrid_lm.h"
#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/run_dir.h"
#include "train/inference/generate.h"
#include "train/inference/sampling.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

using testing::expect_error;

// Frequencies of `draws` samples of sample_token over `logits`.
std::vector<double> frequencies(const std::vector<float>& logits, const SamplingOptions& o, int draws) {
  Generator gen(7);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(sample_token(logits.data(), 4, o, gen))];
  std::vector<double> f;
  for (int c : counts) f.push_back(static_cast<double>(c) / draws);
  return f;
}

const std::vector<float> kLogits = {std::log(0.2f), std::log(0.5f), std::log(0.1f), std::log(0.2f)};

TEST(Sampling, TemperatureOneFollowsTheSoftmax) {
  const std::vector<double> f = frequencies(kLogits, {1.0, 0, 1.0}, 40000);
  const std::vector<double> p = {0.2, 0.5, 0.1, 0.2};
  for (size_t i = 0; i < p.size(); ++i)  // 5 standard deviations of a frequency
    EXPECT_NEAR(f[i], p[i], 5 * std::sqrt(p[i] * (1 - p[i]) / 40000)) << "token " << i;
}

TEST(Sampling, TemperatureSharpensAndZeroIsGreedy) {
  // T = 0.5 squares the probabilities: 0.04, 0.25, 0.01, 0.04 over 0.34.
  const std::vector<double> f = frequencies(kLogits, {0.5, 0, 1.0}, 40000);
  EXPECT_NEAR(f[1], 0.25 / 0.34, 5 * std::sqrt(0.735 * 0.265 / 40000));
  EXPECT_EQ(frequencies(kLogits, {0.0, 0, 1.0}, 100)[1], 1.0);
}

TEST(Sampling, TopKAndTopPRestrictTheCandidates) {
  // top-k 2: tokens 1 and the first of the tied 0/3 (lower id first), renormalized 0.5 : 0.2.
  std::vector<double> f = frequencies(kLogits, {1.0, 2, 1.0}, 40000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[1], 0.5 / 0.7, 5 * std::sqrt(0.714 * 0.286 / 40000));
  // top-p 0.6: 0.5 is not enough, 0.5 + 0.2 is: the same two tokens.
  f = frequencies(kLogits, {1.0, 0, 0.6}, 40000);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[1], 0.5 / 0.7, 5 * std::sqrt(0.714 * 0.286 / 40000));
  // top-p below the largest probability keeps one token.
  EXPECT_EQ(frequencies(kLogits, {1.0, 0, 0.3}, 1000)[1], 1.0);
}

TEST(Sampling, BadFlagsAreErrorsNamingThem) {
  Generator gen(1);
  auto sample = [&](SamplingOptions o) { return [&gen, o] { sample_token(kLogits.data(), 4, o, gen); }; };
  expect_error(sample({-1.0, 0, 1.0}), {"--temperature"});
  expect_error(sample({1.0, -2, 1.0}), {"--top-k"});
  expect_error(sample({1.0, 0, 0.0}), {"--top-p"});
  expect_error(sample({1.0, 0, 1.5}), {"--top-p"});
}

HybridLMConfig tiny_model(int64_t vocab) {
  HybridLMConfig c;
  c.vocab_size = vocab;
  c.layers = {"gdn", "attn"};
  c.mixer.d_model = 16;
  c.mixer.n_heads = 2;
  return c;
}

// Greedy generation with the states equals the argmax of the full forward pass over the
// prompt plus the generated tokens, at every generated position.
TEST(Generate, GreedyTokensAreTheArgmaxOfTheFullForward) {
  Generator gen(3);
  HybridLM model(tiny_model(13), gen);
  const std::vector<int64_t> prompt = {1, 5, 7};
  Generator sampler(0);
  const std::vector<int64_t> out = generate_tokens(model, prompt, 8, {0.0, 0, 1.0}, sampler);
  ASSERT_EQ(out.size(), 8u);
  std::vector<int64_t> all = prompt;
  all.insert(all.end(), out.begin(), out.end() - 1);
  NoGradGuard no_grad;
  Tensor logits = model.forward(Tensor::from_vector(all, {1, static_cast<int64_t>(all.size())}));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t t = static_cast<int64_t>(prompt.size() + i) - 1;
    int64_t best = 0;
    for (int64_t v = 1; v < 13; ++v)
      if (logits.at({0, t, v}) > logits.at({0, t, best})) best = v;
    EXPECT_EQ(out[i], best) << "generated token " << i;
  }
}

// `lat generate` on a checkpoint (file and run directory): prompt, then max_new_tokens
// characters, then a newline; the same seed gives the same text.
TEST(Generate, StreamsPromptAndContinuationFromACheckpoint) {
  const testing::TempDir temp("lat_test_generate_");
  const fs::path& dir = temp.dir();
  const Tokenizer tokenizer = Tokenizer::char_from_text("abcdefgh ijk\n");
  Config config = parse_config(
      "model: {d_model: 16, n_layers: 2, n_heads: 2, layers: \"gdn,attn\"}\ndata: {path: x.txt}\ntrain: {threads: 1}\n",
      "tiny.yaml");
  Generator gen(4);
  HybridLM model(hybrid_lm_config(config.model, tokenizer.vocab_size()), gen);
  Checkpoint c;
  c.step = 1;
  c.config_yaml = to_yaml(config);
  c.tokenizer_type = "char";
  c.tokenizer_vocab = tokenizer.vocab_string();
  for (auto& [name, t] : model.named_parameters()) c.model.emplace_back(name, t);
  save_checkpoint((dir / checkpoint_file_name(1)).string(), c);
  write_latest(dir.string(), checkpoint_file_name(1));

  auto run = [&](const std::string& checkpoint, uint64_t seed) {
    GenerateOptions o;
    o.checkpoint = checkpoint;
    o.prompt = "abc";
    o.max_new_tokens = 20;
    o.sampling.temperature = 1.0;
    o.seed = seed;
    std::ostringstream out;
    generate(o, out);
    return out.str();
  };
  const std::string text = run((dir / checkpoint_file_name(1)).string(), 5);
  EXPECT_EQ(text.substr(0, 3), "abc");
  EXPECT_EQ(text.size(), 3u + 20u + 1u);
  EXPECT_EQ(text.back(), '\n');
  const std::vector<int64_t> ids = tokenizer.encode(text);  // every character is in the vocabulary
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(tokenizer.decode(ids), text);
  EXPECT_EQ(run(dir.string(), 5), text);  // the run directory resolves to the same checkpoint
  EXPECT_NE(run(dir.string(), 6), text);  // 20 draws at temperature 1 over 13 tokens

  GenerateOptions bad;
  bad.checkpoint = dir.string();
  bad.prompt = "xyz";  // not in the vocabulary
  std::ostringstream ignored;
  expect_error<ConfigError>([&] { generate(bad, ignored); }, {"generate: --prompt: ", "'x'"});
  EXPECT_TRUE(ignored.str().empty());  // nothing written before the error
}

// A checkpoint whose stored config asks for 100000 threads, or whose weights hold a NaN, is
// refused before anything is generated.
TEST(Generate, ADamagedCheckpointIsAnErrorBeforeAnyOutput) {
  const testing::TempDir temp("lat_test_generate_");
  const Tokenizer tokenizer = Tokenizer::char_from_text("abcdefgh ijk\n");
  Config config = parse_config(
      "model: {d_model: 16, n_layers: 2, n_heads: 2, layers: \"gdn,attn\"}\ndata: {path: x.txt}\ntrain: {threads: 1}\n",
      "tiny.yaml");
  Generator gen(4);
  HybridLM model(hybrid_lm_config(config.model, tokenizer.vocab_size()), gen);
  Checkpoint c;
  c.tokenizer_type = "char";
  c.tokenizer_vocab = tokenizer.vocab_string();
  for (auto& [name, t] : model.named_parameters()) c.model.emplace_back(name, t.detach().clone());
  GenerateOptions o;
  o.prompt = "abc";
  o.max_new_tokens = 5;
  std::ostringstream out;

  config.train.threads = 100000;  // to_yaml writes what it is given; the reader validates
  c.config_yaml = to_yaml(config);
  o.checkpoint = temp.path("threads.h5");
  save_checkpoint(o.checkpoint, c);
  expect_error<ConfigError>([&] { generate(o, out); },
                            {"'" + o.checkpoint + "': train.threads: expected an int in [0, 1024], got 100000"});

  config.train.threads = 1;
  c.config_yaml = to_yaml(config);
  std::vector<float> values = c.model.back().second.to_vector<float>();
  values[3] = std::numeric_limits<float>::quiet_NaN();
  c.model.back().second = Tensor::from_vector(values, c.model.back().second.shape());
  o.checkpoint = temp.path("nan.h5");
  save_checkpoint(o.checkpoint, c);
  expect_error([&] { generate(o, out); }, {o.checkpoint, "/model/" + c.model.back().first + ": element 3 is nan"});
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace lat
