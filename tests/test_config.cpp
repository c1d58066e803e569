// Config loading (train/config/config.h): defaults, a full file, every error kind with the key and
// its line, --set overrides, to_yaml round trip and the resume comparison.
#include <source_location>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/config.h"

namespace {

using namespace lat::testing;

/// A fresh directory per test (write(name, text) puts a file in it), removed at the end.
using ConfigTest = TempDirTest;

/// parse_config of `yaml` with a data.path line prepended (it is required), as "run.yaml".
/// The data line is line 1, so the snippet's first line is line 2.
lat::Config parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return lat::parse_config("data.path: corpus.txt\n" + yaml, "run.yaml", overrides);
}

/// Expects parse(yaml, overrides) to throw a ConfigError whose message is exactly `expected`.
void expect_parse_error(const std::string& yaml, const std::vector<std::string>& overrides, const std::string& expected,
                        std::source_location where = std::source_location::current()) {
  const std::string message = expect_error<lat::ConfigError>([&] { parse(yaml, overrides); }, {expected}, where);
  const ::testing::ScopedTrace trace(where.file_name(), static_cast<int>(where.line()), "expect_parse_error");
  EXPECT_EQ(message, expected);
}

void expect_parse_error(const std::string& yaml, const std::string& expected,
                        std::source_location where = std::source_location::current()) {
  expect_parse_error(yaml, {}, expected, where);
}

TEST(Config, ErrorTypeIsALatError) {
  lat::ConfigError e("x");
  const lat::Error& base = e;
  EXPECT_STREQ(base.what(), "x");
}

TEST(Config, DefaultsMatchTheSchemaTable) {
  const lat::Config c;
  EXPECT_EQ(c.model.vocab_size, 0);
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.model.n_layers, 4);
  EXPECT_EQ(c.model.n_heads, 4);
  EXPECT_EQ(c.model.layers, "gdn,gdn,gdn,attn");
  EXPECT_EQ(c.model.expand_v, 1.0);
  EXPECT_EQ(c.model.mlp_ratio, 4.0);
  EXPECT_EQ(c.model.norm_eps, 1e-6);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.attn.window_size, 0);
  EXPECT_EQ(c.model.attn.rope_theta, 10000.0);
  EXPECT_EQ(c.model.linear.feature_map, "elu1");
  EXPECT_FALSE(c.model.linear.normalize);
  EXPECT_TRUE(c.model.linear.use_short_conv);
  EXPECT_EQ(c.model.linear.conv_size, 4);
  EXPECT_TRUE(c.model.linear.use_gate);
  EXPECT_EQ(c.model.linear.chunk_size, 64);
  EXPECT_EQ(c.data.format, "auto");
  EXPECT_EQ(c.data.tokenizer, "char");
  EXPECT_EQ(c.data.bin_dtype, "uint16");
  EXPECT_EQ(c.data.h5_dataset, "tokens");
  EXPECT_EQ(c.data.block_size, 256);
  EXPECT_EQ(c.data.val_fraction, 0.1);
  EXPECT_EQ(c.train.batch_size, 12);
  EXPECT_EQ(c.train.grad_accum, 1);
  EXPECT_EQ(c.train.max_steps, 2000);
  EXPECT_EQ(c.train.stop_at, 0);
  EXPECT_EQ(c.train.optimizer, "adamw");
  EXPECT_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.train.min_lr, 1e-4);
  EXPECT_EQ(c.train.warmup, 100);
  EXPECT_EQ(c.train.schedule, "cosine");
  EXPECT_EQ(c.train.betas[0], 0.9);
  EXPECT_EQ(c.train.betas[1], 0.99);
  EXPECT_EQ(c.train.eps, 1e-8);
  EXPECT_EQ(c.train.weight_decay, 0.1);
  EXPECT_EQ(c.train.momentum, 0.9);
  EXPECT_EQ(c.train.grad_clip, 1.0);
  EXPECT_EQ(c.train.eval_every, 250);
  EXPECT_EQ(c.train.eval_batches, 20);
  EXPECT_EQ(c.train.log_every, 10);
  EXPECT_EQ(c.train.ckpt_every, 500);
  EXPECT_EQ(c.train.keep_last, 3);
  EXPECT_EQ(c.train.resume, "auto");
  EXPECT_EQ(c.train.seed, 1337);
  EXPECT_EQ(c.train.device, "cpu");
  EXPECT_EQ(c.train.threads, 0);
  EXPECT_TRUE(c.init_from.empty());
  EXPECT_TRUE(c.init_from_strict);
  EXPECT_TRUE(c.freeze.empty());
  EXPECT_TRUE(c.lr_mult.empty());
}

TEST(Config, MinimalFileResolvesDerivedDefaults) {
  const lat::Config c = lat::parse_config("data:\n  path: corpus.txt\n", "configs/tiny_run.yaml");
  EXPECT_EQ(c.data.path, "corpus.txt");
  EXPECT_EQ(c.model.head_dim, 32);          // d_model / n_heads
  EXPECT_EQ(c.model.attn.n_kv_heads, 4);    // attn.n_heads
  EXPECT_EQ(c.model.attn.n_heads, 4);       // n_heads
  EXPECT_EQ(c.model.attn.head_dim, 32);     // head_dim
  EXPECT_EQ(c.model.linear.n_v_heads, 4);   // n_heads
  EXPECT_EQ(c.train.out_dir, "runs/tiny_run");
  lat::Config expected;
  expected.data.path = "corpus.txt";
  expected.model.head_dim = 32;
  expected.model.attn.n_kv_heads = 4;
  expected.model.attn.n_heads = 4;
  expected.model.attn.head_dim = 32;
  expected.model.linear.n_v_heads = 4;
  expected.train.out_dir = "runs/tiny_run";
  EXPECT_EQ(c, expected);
}

TEST_F(ConfigTest, FullValidFile) {
  write("base.h5", "not read by the config");
  const std::string path = write("full.yaml", R"(# every section, nested and dotted forms
model:
  vocab_size: 65
  d_model: 96
  n_layers: 6
  n_heads: 3
  head_dim: 40
  layers: "gdn, attn ,delta_net"
  expand_v: 2
  mlp_ratio: 3.5
  norm_eps: 1e-5
  tie_embeddings: true
  attn:
    window_size: 128
    n_kv_heads: 1
    rope_theta: 500000.0
  linear: {feature_map: relu, normalize: true, use_short_conv: false, conv_size: 3, use_gate: false, chunk_size: 32}
data:
  path: data/tiny.bin
  format: bin
  tokenizer: byte
  bin_dtype: uint32
  h5_dataset: ids
  block_size: 64
  val_fraction: 0.05
train.batch_size: 8
train:
  grad_accum: 2
  max_steps: 1e4
  stop_at: 100
  optimizer: sgd
  lr: 3e-4
  min_lr: 0
  warmup: 0
  schedule: linear
  betas: [0.8, 0.95]
  eps: 1e-6
  weight_decay: 0.0
  momentum: 0.5
  grad_clip: 0
  eval_every: 0
  eval_batches: 5
  log_every: 1
  ckpt_every: 1
  keep_last: 0
  out_dir: somewhere/else
  resume: never
  seed: 7
  device: cuda:1
  threads: 2
init_from: )" + (dir_ / "base.h5").string() + R"(
init_from_strict: false
freeze: ["layers.0.*", embeddings.weight]
lr_mult:
  "layers.1.*": 0.5
  "*norm*": 0
)");
  const lat::Config c = lat::load_config(path);
  EXPECT_EQ(c.model.vocab_size, 65);
  EXPECT_EQ(c.model.d_model, 96);
  EXPECT_EQ(c.model.n_layers, 6);
  EXPECT_EQ(c.model.n_heads, 3);
  EXPECT_EQ(c.model.head_dim, 40);
  EXPECT_EQ(c.model.layers, "gdn, attn ,delta_net");
  EXPECT_EQ(lat::layer_mixers(c.model),
            (std::vector<std::string>{"gdn", "attn", "delta_net", "gdn", "attn", "delta_net"}));
  EXPECT_EQ(c.model.expand_v, 2.0);
  EXPECT_EQ(c.model.mlp_ratio, 3.5);
  EXPECT_EQ(c.model.norm_eps, 1e-5);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.attn.window_size, 128);
  EXPECT_EQ(c.model.attn.n_kv_heads, 1);
  EXPECT_EQ(c.model.attn.rope_theta, 500000.0);
  EXPECT_EQ(c.model.linear.feature_map, "relu");
  EXPECT_TRUE(c.model.linear.normalize);
  EXPECT_FALSE(c.model.linear.use_short_conv);
  EXPECT_EQ(c.model.linear.conv_size, 3);
  EXPECT_FALSE(c.model.linear.use_gate);
  EXPECT_EQ(c.model.linear.chunk_size, 32);
  EXPECT_EQ(c.data.path, "data/tiny.bin");
  EXPECT_EQ(c.data.format, "bin");
  EXPECT_EQ(c.data.tokenizer, "byte");
  EXPECT_EQ(c.data.bin_dtype, "uint32");
  EXPECT_EQ(c.data.h5_dataset, "ids");
  EXPECT_EQ(c.data.block_size, 64);
  EXPECT_EQ(c.data.val_fraction, 0.05);
  EXPECT_EQ(c.train.batch_size, 8);
  EXPECT_EQ(c.train.grad_accum, 2);
  EXPECT_EQ(c.train.max_steps, 10000);
  EXPECT_EQ(c.train.stop_at, 100);
  EXPECT_EQ(c.train.optimizer, "sgd");
  EXPECT_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.min_lr, 0.0);
  EXPECT_EQ(c.train.warmup, 0);
  EXPECT_EQ(c.train.schedule, "linear");
  EXPECT_EQ(c.train.betas[0], 0.8);
  EXPECT_EQ(c.train.betas[1], 0.95);
  EXPECT_EQ(c.train.eps, 1e-6);
  EXPECT_EQ(c.train.weight_decay, 0.0);
  EXPECT_EQ(c.train.momentum, 0.5);
  EXPECT_EQ(c.train.grad_clip, 0.0);
  EXPECT_EQ(c.train.eval_every, 0);
  EXPECT_EQ(c.train.eval_batches, 5);
  EXPECT_EQ(c.train.log_every, 1);
  EXPECT_EQ(c.train.ckpt_every, 1);
  EXPECT_EQ(c.train.keep_last, 0);
  EXPECT_EQ(c.train.out_dir, "somewhere/else");
  EXPECT_EQ(c.train.resume, "never");
  EXPECT_EQ(c.train.seed, 7);
  EXPECT_EQ(c.train.device, "cuda:1");
  EXPECT_EQ(c.train.threads, 2);
  EXPECT_EQ(c.init_from, (dir_ / "base.h5").string());
  EXPECT_FALSE(c.init_from_strict);
  EXPECT_EQ(c.freeze, (std::vector<std::string>{"layers.0.*", "embeddings.weight"}));
  ASSERT_EQ(c.lr_mult.size(), 2u);
  EXPECT_EQ(c.lr_mult[0], (std::pair<std::string, double>{"layers.1.*", 0.5}));
  EXPECT_EQ(c.lr_mult[1], (std::pair<std::string, double>{"*norm*", 0.0}));
}

TEST_F(ConfigTest, OutDirDefaultsToConfigFileName) {
  const std::string path = write("shakespeare_small.yaml", "data.path: x.txt\n");
  EXPECT_EQ(lat::load_config(path).train.out_dir, "runs/shakespeare_small");
}

TEST_F(ConfigTest, MissingFileAndSyntaxErrorNameTheFile) {
  const std::string missing = (dir_ / "nope.yaml").string();
  expect_error<lat::ConfigError>([&] { lat::load_config(missing); }, {missing, "no such file"});

  expect_error<lat::ConfigError>([&] { lat::load_config(dir_.string()); }, {"is a directory"});

  const std::string bad = write("bad.yaml", "data:\n  path: x\ntrain: [1, 2\n");
  expect_error<lat::ConfigError>([&] { lat::load_config(bad); }, {"YAML syntax error", bad + ":"});

  expect_error<lat::ConfigError>([&] { lat::parse_config("- a\n- b\n", "list.yaml"); },
                                 {"expected a map of keys at the top level, got a list"});
}

TEST(Config, UnknownKeySuggestsNearName) {
  expect_parse_error("model:\n  d_modle: 64\n",
                     "model.d_modle: unknown key, did you mean 'model.d_model'? (run.yaml:3)");
  // A key in the wrong section is found by its last component.
  expect_parse_error("lr: 0.1\n", "lr: unknown key, did you mean 'train.lr'? (run.yaml:2)");
  expect_parse_error("train:\n  batchsize: 4\n",
                     "train.batchsize: unknown key, did you mean 'train.batch_size'? (run.yaml:3)");
  expect_parse_error("model:\n  atn:\n    window_size: 4\n",
                     "model.atn: unknown key, did you mean 'model.attn'? (run.yaml:3)");
  // Nothing near: no suggestion.
  expect_parse_error("\n\nqqqqzzzz: 1\n", "qqqqzzzz: unknown key (run.yaml:4)");
}

TEST(Config, UnknownMixerSectionNamesTheSectionThatHoldsItsSizes) {
  // mla and attn have sections of their own, so `model.kda:` is a natural guess; its sizes are
  // the linear keys, and the nearest spelling ('model.mla', 'model.mamba.chunk_size') misleads.
  expect_parse_error("model:\n  kda:\n    chunk_size: 16\n",
                     "model.kda: unknown key: kda layers take their sizes from model.linear.* (there is no "
                     "model.kda section) (run.yaml:3)");
  expect_parse_error("", {"model.kda.chunk_size=16"},
                     "model.kda.chunk_size: unknown key: kda layers take their sizes from model.linear.* (there is "
                     "no model.kda section), did you mean 'model.linear.chunk_size'? (--set model.kda.chunk_size)");
  expect_parse_error("", {"model.mamba2.d_state=16"},
                     "model.mamba2.d_state: unknown key: mamba2 layers take their sizes from model.mamba.* (there "
                     "is no model.mamba2 section), did you mean 'model.mamba.d_state'? (--set model.mamba2.d_state)");
}

TEST(Config, DuplicateKeysNameTheSecondLine) {
  expect_parse_error("train:\n  lr: 1e-3\n  seed: 1\n  lr: 2e-3\n",
                     "train.lr: duplicate key, first set at line 3 (run.yaml:5)");
  // The same key in nested and dotted form.
  expect_parse_error("train:\n  lr: 1e-3\ntrain.lr: 2e-3\n",
                     "train.lr: duplicate key, first set at run.yaml:3 (run.yaml:4)");
  // A repeated section.
  expect_parse_error("model:\n  d_model: 64\nmodel:\n  n_layers: 2\n",
                     "model: duplicate key, first set at line 2 (run.yaml:4)");
  expect_parse_error("lr_mult:\n  \"a.*\": 1\n  \"a.*\": 2\n", "lr_mult: duplicate pattern 'a.*' (run.yaml:4)");
}

TEST(Config, WrongTypesNameKeyValueAndLine) {
  expect_parse_error("train:\n  lr: fast\n", "train.lr: expected a float, got 'fast' (run.yaml:3)");
  expect_parse_error("model.d_model: 64.5\n", "model.d_model: expected an int, got '64.5' (run.yaml:2)");
  expect_parse_error("model.tie_embeddings: maybe\n",
                     "model.tie_embeddings: expected true or false, got 'maybe' (run.yaml:2)");
  expect_parse_error("train.betas: 0.9\n", "train.betas: expected a list of 2 floats, got '0.9' (run.yaml:2)");
  expect_parse_error("train.betas: [0.9, 0.99, 0.999]\n",
                     "train.betas: expected a list of 2 floats, got a list (run.yaml:2)");
  expect_parse_error("freeze: {a: 1}\n", "freeze: expected a list of strings, got a map (run.yaml:2)");
  expect_parse_error("lr_mult:\n  \"x.*\": high\n", "lr_mult: expected a float, got 'high' (run.yaml:3)");
  expect_parse_error("train:\n  optimizer: [adamw]\n", "train.optimizer: expected a string, got a list (run.yaml:3)");
  expect_parse_error("train: 5\n", "train: expected a map of keys, got '5' (run.yaml:2)");
  expect_parse_error("train:\n  lr: .nan\n", "train.lr: expected a float, got '.nan' (run.yaml:3)");
}

/// Each impossible value is rejected, naming the key and its line.
TEST(Config, ImpossibleValues) {
  struct Case {
    std::string yaml;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"model:\n  d_model: 130\n  n_heads: 4\n",
       "model.n_heads: model.d_model (130) is not divisible by model.n_heads (4); set model.head_dim or change one "
       "of them (run.yaml:4)"},
      {"model:\n  d_model: 100\n  n_heads: 4\n  layers: gdn,attn\n",
       "model.d_model: attention layers need an even head_dim (RoPE rotates pairs of dimensions), got head_dim 25 "
       "(d_model / n_heads unless model.head_dim or model.attn.head_dim is set) (run.yaml:3)"},
      {"model:\n  head_dim: 33\n  layers: attn\n",
       "model.head_dim: attention layers need an even head_dim (RoPE rotates pairs of dimensions), got head_dim 33 "
       "(d_model / n_heads unless model.head_dim or model.attn.head_dim is set) (run.yaml:3)"},
      {"model.n_layers: 0\n", "model.n_layers: expected an int in [1, 1024], got 0 (run.yaml:2)"},
      {"model.layers: gdn,gdm\n",
       "model.layers: unknown mixer 'gdm', did you mean 'gdn'? (expected attn, linear_attn, simple_gla, retention, "
       "delta_net, gdn, mamba2, kda, mla) (run.yaml:2)"},
      {"model.layers: gdn,,attn\n", "model.layers: empty mixer name in 'gdn,,attn' (run.yaml:2)"},
      {"model:\n  n_layers: 2\n  layers: gdn,attn,gdn\n",
       "model.layers: has 3 mixers but model.n_layers is 2 (the pattern repeats to n_layers, so give at most 2) "
       "(run.yaml:4)"},
      {"model.attn.n_kv_heads: 3\n",
       "model.attn.n_kv_heads: model.n_heads (4) is not a multiple of model.attn.n_kv_heads (3) (run.yaml:2)"},
      {"model:\n  attn:\n    n_heads: 6\n    n_kv_heads: 4\n",
       "model.attn.n_kv_heads: model.attn.n_heads (6) is not a multiple of model.attn.n_kv_heads (4) (run.yaml:5)"},
      {"model:\n  layers: gdn,attn\n  attn:\n    head_dim: 15\n",
       "model.attn.head_dim: attention layers need an even head_dim (RoPE rotates pairs of dimensions), got head_dim "
       "15 (run.yaml:5)"},
      {"model:\n  layers: gdn,attn\n  attn:\n    head_dim: 20\n    rope_fraction: 0.25\n",
       "model.attn.rope_fraction: rotates floor(head_dim 20 * 0.25) = 5 dimensions; RoPE needs a positive even number "
       "(run.yaml:6)"},
      {"model.attn.rope_fraction: 1.5\n", "model.attn.rope_fraction: expected a float in (0, 1], got 1.5 (run.yaml:2)"},
      {"model.linear.n_v_heads: 6\n",
       "model.linear.n_v_heads: expected a multiple of model.n_heads (4), got 6 (run.yaml:2)"},
      {"model:\n  layers: gdn,simple_gla,attn\n  linear:\n    n_v_heads: 8\n",
       "model.linear.n_v_heads: value heads apart from the key heads exist in gdn and delta_net layers only, but "
       "model.layers has 'simple_gla' (run.yaml:5)"},
      {"model.linear.feature_map: elu\n",
       "model.linear.feature_map: unknown value 'elu', did you mean 'elu1'? (expected one of elu1, relu, identity) "
       "(run.yaml:2)"},
      {"model.expand_v: 0.3\n", "model.expand_v: head_dim (32) * expand_v must be a whole number >= 1 (run.yaml:2)"},
      {"train.schedule: cosin\n",
       "train.schedule: unknown value 'cosin', did you mean 'cosine'? (expected one of cosine, linear, constant) "
       "(run.yaml:2)"},
      {"train.optimizer: adam\n",
       "train.optimizer: unknown value 'adam', did you mean 'adamw'? (expected one of adamw, sgd) (run.yaml:2)"},
      {"train.device: gpu\n", "train.device: unknown device 'gpu' (expected cpu, cuda or cuda:N) (run.yaml:2)"},
      {"data.format: txt\n",
       "data.format: unknown value 'txt', did you mean 'text'? (expected one of auto, text, bin, h5) (run.yaml:2)"},
      {"data.tokenizer: word\n",
       "data.tokenizer: no such file or directory: 'word' (expected char, byte or the path of a tokenizer.json, a "
       "SentencePiece .model or a directory holding one) (run.yaml:2)"},
      {"data.tokenizer: chr\n",
       "data.tokenizer: no such file or directory: 'chr', did you mean 'char'? (expected char, byte or the path of a "
       "tokenizer.json, a SentencePiece .model or a directory holding one) (run.yaml:2)"},
      {"train.lr: -0.001\n", "train.lr: expected a float in (0, 10], got -0.001 (run.yaml:2)"},
      {"train.min_lr: 0.01\n", "train.min_lr: min_lr (0.01) is above train.lr (0.001) (run.yaml:2)"},
      {"data.val_fraction: 0\n", "data.val_fraction: expected a float in (0, 1), got 0 (run.yaml:2)"},
      {"data.val_fraction: 1\n", "data.val_fraction: expected a float in (0, 1), got 1 (run.yaml:2)"},
      {"data.block_size: 0\n", "data.block_size: expected an int in [1, 1048576], got 0 (run.yaml:2)"},
      {"train.batch_size: 0\n", "train.batch_size: expected an int in [1, 65536], got 0 (run.yaml:2)"},
      {"train.betas: [0.9, 1.0]\n", "train.betas: expected floats in [0, 1), got 1 (run.yaml:2)"},
      {"train.keep_last: -1\n", "train.keep_last: expected an int >= 0, got -1 (run.yaml:2)"},
      {"train.resume: nevr\n",
       "train.resume: expected auto, never or an existing checkpoint path, got 'nevr', did you mean 'never'? "
       "(run.yaml:2)"},
  };
  for (const Case& c : cases) {
    // Path checks only happen in load_config: go through a file.
    const TempDir dir("lat_test_config_impossible_");
    const std::string file = dir.path("run.yaml");
    write_bytes(file, "data.path: corpus.txt\n" + c.yaml);
    const std::string expected = std::string(c.expected).replace(c.expected.rfind("run.yaml"), 8, file);
    const std::string message = expect_error<lat::ConfigError>([&] { lat::load_config(file); }, {expected});
    EXPECT_EQ(message, expected) << "for:\n" << c.yaml;
  }
  // An odd head_dim is fine without attention layers (no RoPE).
  EXPECT_EQ(parse("model:\n  d_model: 100\n  n_heads: 4\n  layers: gdn\n").model.head_dim, 25);
  // d_model not divisible by n_heads is fine once head_dim is set.
  EXPECT_EQ(parse("model:\n  d_model: 130\n  n_heads: 4\n  head_dim: 32\n").model.head_dim, 32);
  // data.path is required.
  const std::string required = "data.path: required: the text or token file to train on (not set in run.yaml)";
  EXPECT_EQ(expect_error<lat::ConfigError>([] { lat::parse_config("train.lr: 0.1\n", "run.yaml"); }, {required}),
            required);
}

// Sizes have upper bounds, so that a damaged value (in a checkpoint's stored config, say)
// cannot ask for terabytes or 10^5 threads; the bound itself is accepted.
TEST(Config, SizesAboveTheirBoundsAreErrors) {
  struct Case {
    std::string yaml;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"model.vocab_size: 16777217\n", "model.vocab_size: expected an int in [0, 16777216], got 16777217"},
      {"model.d_model: 65537\n", "model.d_model: expected an int in [1, 65536], got 65537"},
      {"model.n_layers: 1000000\n", "model.n_layers: expected an int in [1, 1024], got 1000000"},
      {"model.n_heads: 1025\n", "model.n_heads: expected an int in [1, 1024], got 1025"},
      {"model.head_dim: 1025\n", "model.head_dim: expected an int in [0, 1024], got 1025"},
      {"model.mlp_ratio: 64.5\n", "model.mlp_ratio: expected a float in (0, 64], got 64.5"},
      {"model.attn.n_kv_heads: 1025\n", "model.attn.n_kv_heads: expected an int in [0, 1024], got 1025"},
      {"model.linear.conv_size: 65\n", "model.linear.conv_size: expected an int in [1, 64], got 65"},
      {"model.linear.chunk_size: 1025\n", "model.linear.chunk_size: expected an int in [1, 1024], got 1025"},
      {"data.block_size: 1048577\n", "data.block_size: expected an int in [1, 1048576], got 1048577"},
      {"data.mqar.vocab: 16777217\n", "data.mqar.vocab: expected an int in [4, 16777216], got 16777217"},
      {"train.batch_size: 65537\n", "train.batch_size: expected an int in [1, 65536], got 65537"},
      {"train.threads: 100000\n", "train.threads: expected an int in [0, 1024], got 100000"},
  };
  for (const Case& c : cases) expect_parse_error(c.yaml, c.expected + " (run.yaml:2)");

  const lat::Config at_bounds = parse(
      "model: {vocab_size: 16777216, n_layers: 1024, mlp_ratio: 64, linear: {conv_size: 64, chunk_size: 1024}}\n"
      "data.block_size: 1048576\ntrain: {batch_size: 65536, threads: 1024}\n");
  EXPECT_EQ(at_bounds.model.vocab_size, 16777216);
  EXPECT_EQ(at_bounds.model.n_layers, 1024);
  EXPECT_EQ(at_bounds.model.mlp_ratio, 64.0);
  EXPECT_EQ(at_bounds.model.linear.conv_size, 64);
  EXPECT_EQ(at_bounds.model.linear.chunk_size, 1024);
  EXPECT_EQ(at_bounds.data.block_size, 1048576);
  EXPECT_EQ(at_bounds.train.batch_size, 65536);
  EXPECT_EQ(at_bounds.train.threads, 1024);
}

// Every float key has an upper bound too, so that a mistyped exponent is an error naming the
// key rather than an inf or nan in the middle of a run; the bound itself is accepted.
TEST(Config, FloatsOutsideTheirRangesAreErrors) {
  struct Case {
    std::string yaml;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"model.expand_v: 65\n", "model.expand_v: expected a float in (0, 64], got 65"},
      {"model.norm_eps: 1e300\n", "model.norm_eps: expected a float in (0, 1], got 1e+300"},
      {"model.norm_eps: 0\n", "model.norm_eps: expected a float in (0, 1], got 0"},
      {"model.attn.rope_theta: 1.5e12\n", "model.attn.rope_theta: expected a float in (0, 1e+12], got 1.5e+12"},
      {"data.mqar.alpha: 10.5\n", "data.mqar.alpha: expected a float in (0, 10], got 10.5"},
      {"train.lr: 11\n", "train.lr: expected a float in (0, 10], got 11"},
      {"train.min_lr: -1\n", "train.min_lr: expected a float in [0, 10], got -1"},
      {"train.eps: 2\n", "train.eps: expected a float in (0, 1], got 2"},
      {"train.weight_decay: 1e3\n", "train.weight_decay: expected a float in [0, 10], got 1000"},
      {"train.weight_decay: -0.1\n", "train.weight_decay: expected a float in [0, 10], got -0.1"},
      {"lr_mult: {\"a.*\": 101}\n", "lr_mult: expected multipliers in [0, 100], got 101"},
  };
  for (const Case& c : cases) expect_parse_error(c.yaml, c.expected + " (run.yaml:2)");

  const lat::Config at_bounds = parse(
      "model: {layers: attn, expand_v: 64, norm_eps: 1, attn: {rope_theta: 1e12}}\ndata.mqar.alpha: 10\n"
      "train: {lr: 10, min_lr: 10, eps: 1, weight_decay: 10}\nlr_mult: {\"a.*\": 100}\n");
  EXPECT_EQ(at_bounds.model.expand_v, 64.0);
  EXPECT_EQ(at_bounds.model.norm_eps, 1.0);
  EXPECT_EQ(at_bounds.model.attn.rope_theta, 1e12);
  EXPECT_EQ(at_bounds.data.mqar.alpha, 10.0);
  EXPECT_EQ(at_bounds.train.lr, 10.0);
  EXPECT_EQ(at_bounds.train.min_lr, 10.0);
  EXPECT_EQ(at_bounds.train.eps, 1.0);
  EXPECT_EQ(at_bounds.train.weight_decay, 10.0);
  EXPECT_EQ(at_bounds.lr_mult[0].second, 100.0);
}

// A quoted scalar is a string in YAML: an int, float or bool key refuses it whatever its text,
// with the hint when the text is a valid value unquoted; an explicit type tag is the value.
TEST(Config, QuotedNumbersAndBoolsAreRefused) {
  expect_parse_error("model.d_model: \"32\"\n",
                     "model.d_model: expected an int, got the string \"32\" (remove the quotes) (run.yaml:2)");
  expect_parse_error("model.d_model: '32'\n",
                     "model.d_model: expected an int, got the string \"32\" (remove the quotes) (run.yaml:2)");
  expect_parse_error("model.d_model: !!str 32\n",
                     "model.d_model: expected an int, got the string \"32\" (remove the quotes) (run.yaml:2)");
  expect_parse_error("model.d_model: \"big\"\n", "model.d_model: expected an int, got the string \"big\" (run.yaml:2)");
  expect_parse_error("train:\n  lr: \"1e-3\"\n",
                     "train.lr: expected a float, got the string \"1e-3\" (remove the quotes) (run.yaml:3)");
  expect_parse_error("model.tie_embeddings: \"true\"\n",
                     "model.tie_embeddings: expected true or false, got the string \"true\" (remove the quotes) "
                     "(run.yaml:2)");
  expect_parse_error("data.packing: \"yes\"\n",
                     "data.packing: expected true or false, got the string \"yes\" (run.yaml:2)");
  expect_parse_error("train.betas: [0.9, \"0.95\"]\n",
                     "train.betas: expected a float, got the string \"0.95\" (remove the quotes) (run.yaml:2)");
  expect_parse_error("data.mqar.pairs: [4, \"8\"]\n",
                     "data.mqar.pairs: expected an int or a non-empty list of ints, got the string \"8\" (remove the "
                     "quotes) (run.yaml:2)");
  expect_parse_error("lr_mult:\n  \"a.*\": \"0.5\"\n",
                     "lr_mult: expected a float, got the string \"0.5\" (remove the quotes) (run.yaml:3)");
  expect_parse_error("", {"model.d_model=\"32\""},
                     "model.d_model: expected an int, got the string \"32\" (remove the quotes) (--set model.d_model)");

  const lat::Config tagged = parse(
      "model: {d_model: !!int \"48\", n_heads: 2, norm_eps: !!float \"1e-5\", tie_embeddings: !!bool \"true\"}\n");
  EXPECT_EQ(tagged.model.d_model, 48);
  EXPECT_EQ(tagged.model.norm_eps, 1e-5);
  EXPECT_TRUE(tagged.model.tie_embeddings);
  // String keys take quoted text as before.
  EXPECT_EQ(parse("model.layers: \"gdn\"\n").model.layers, "gdn");
}

TEST(Config, EmptyListNamesTheKeyAndAsksForANonEmptyOne) {
  expect_parse_error("data:\n  task: mqar\n  mqar:\n    pairs: []\n",
                     "data.mqar.pairs: expected an int or a non-empty list of ints, got an empty list (run.yaml:5)");
  expect_parse_error("", {"data.mqar.pairs=[]"},
                     "data.mqar.pairs: expected an int or a non-empty list of ints, got an empty list (--set "
                     "data.mqar.pairs)");
  expect_parse_error("train.betas: []\n", "train.betas: expected a list of 2 floats, got an empty list (run.yaml:2)");
}

TEST_F(ConfigTest, ASecondYamlDocumentIsRefusedNamingItsLine) {
  const std::string message =
      "config: a second YAML document (or text after the first that YAML cannot read), "
      "expected one per file: remove it or merge it into the first (";
  const std::string two = write("two.yaml", "data.path: x.txt\ntrain:\n  lr: 0.01\n---\ntrain:\n  lr: 0.5\n");
  EXPECT_EQ(expect_error<lat::ConfigError>([&] { lat::load_config(two); }, {message + two + ":4)"}),
            message + two + ":4)");
  // A file that opens with '---' holds one document; an empty second one is refused all the same.
  EXPECT_EQ(lat::load_config(write("one.yaml", "---\ndata.path: x.txt\n")).data.path, "x.txt");
  const std::string empty_second = write("empty_second.yaml", "---\ndata.path: x.txt\n---\n");
  expect_error<lat::ConfigError>([&] { lat::load_config(empty_second); }, {message + empty_second + ":3)"});
  // A stray ',' is text YAML::Load skipped silently (and YAML::LoadAll loops on forever).
  const std::string comma = write("comma.yaml", ",\n");
  expect_error<lat::ConfigError>([&] { lat::load_config(comma); }, {message + comma + ":1)"});
  // The end-of-document marker '...' alone is no second document.
  EXPECT_EQ(lat::load_config(write("dots.yaml", "data.path: x.txt\n...\n")).data.path, "x.txt");
  expect_parse_error("", {"train.lr=0.1\n---\n0.2"},
                     "train.lr: the value holds a second YAML document (or text after the first that YAML cannot "
                     "read), expected one value (--set train.lr)");
}

TEST(Config, SetOverridesAnyKey) {
  const lat::Config c = parse("train:\n  lr: 0.01\n",
                              {"train.lr=0.002", "model.layers=gdn,attn", "freeze=[\"layers.0.*\"]",
                               "lr_mult={\"a.*\": 0.5}", "model={d_model: 64, n_heads: 2}", "init_from_strict=false",
                               "train.lr=0.003"});
  EXPECT_EQ(c.train.lr, 0.003);  // later overrides win
  EXPECT_EQ(c.model.layers, "gdn,attn");
  EXPECT_EQ(c.freeze, std::vector<std::string>{"layers.0.*"});
  ASSERT_EQ(c.lr_mult.size(), 1u);
  EXPECT_EQ(c.lr_mult[0].second, 0.5);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.head_dim, 32);
  EXPECT_FALSE(c.init_from_strict);
}

TEST(Config, SetErrorsNameTheSetKey) {
  expect_parse_error("", {"model.d_modle=64"},
                     "model.d_modle: unknown key, did you mean 'model.d_model'? (--set model.d_modle)");
  expect_parse_error("", {"train.lr=fast"}, "train.lr: expected a float, got 'fast' (--set train.lr)");
  expect_parse_error("", {"train.lr"}, "--set 'train.lr': expected key=value");
  expect_parse_error("", {"=3"}, "--set '=3': expected key=value");
  // An impossible value set on the command line names the --set key, not the file.
  expect_parse_error("model.n_layers: 2\n", {"model.n_layers=0"},
                     "model.n_layers: expected an int in [1, 1024], got 0 (--set model.n_layers)");
  expect_parse_error("", {"model={d_modl: 3}"},
                     "model.d_modl: unknown key, did you mean 'model.d_model'? (--set model)");
}

TEST_F(ConfigTest, RoundTripThroughToYaml) {
  const lat::Config c = parse(R"(model:
  vocab_size: 65
  d_model: 96
  n_heads: 3
  layers: "retention,attn"
  norm_eps: 1.5e-7
  attn: {rope_theta: 12345.678}
train:
  lr: 3.0e-4
  min_lr: 1.0e-5
  betas: [0.85, 0.975]
  out_dir: "runs/a b: c"
  seed: 0
freeze: ["*", "layers.1.*"]
lr_mult: {"*norm*": 0.1, "embeddings.*": 2}
)");
  const std::string yaml = lat::to_yaml(c);
  const lat::Config back = lat::parse_config(yaml, "saved.yaml");
  EXPECT_EQ(back, c) << yaml;
  EXPECT_EQ(lat::to_yaml(back), yaml);
  // Every schema key appears in the resolved YAML, including the derived defaults.
  for (const char* key : {"vocab_size:", "head_dim: 32", "n_kv_heads: 3", "feature_map:", "chunk_size:",
                          "h5_dataset:", "threads:", "init_from: ~", "init_from_strict:", "out_dir:"})
    EXPECT_NE(yaml.find(key), std::string::npos) << key << " missing from\n" << yaml;

  // Through a file, with the defaults only.
  const lat::Config defaults = parse("");
  const std::string file = write("resolved.yaml", lat::to_yaml(defaults));
  EXPECT_EQ(lat::load_config(file), defaults);
}

TEST(Config, ResumeIncompatibleKeys) {
  const lat::Config saved = parse("");
  EXPECT_TRUE(lat::resume_incompatible_keys(saved, saved).empty());

  // train.* keys may change, except batch_size, grad_accum and seed.
  lat::Config now = saved;
  now.train.lr = 0.5;
  now.train.max_steps = 5000;
  now.train.stop_at = 10;
  now.train.out_dir = "elsewhere";
  now.train.resume = "never";
  EXPECT_TRUE(lat::resume_incompatible_keys(saved, now).empty());

  now.train.batch_size = 3;
  now.train.seed = 5;
  now.model.d_model = 64;
  now.model.attn.window_size = 16;
  now.data.block_size = 32;
  now.freeze = {"layers.0.*"};
  now.train.grad_accum = 4;
  EXPECT_EQ(lat::resume_incompatible_keys(saved, now),
            (std::vector<std::string>{"model.d_model", "model.attn.window_size", "data.block_size",
                                      "train.batch_size", "train.grad_accum", "train.seed", "freeze"}));
}

TEST(Config, LayerMixersRepeatThePattern) {
  lat::ModelConfig model;
  model.layers = "gdn, attn";
  model.n_layers = 3;
  EXPECT_EQ(lat::layer_mixers(model), (std::vector<std::string>{"gdn", "attn", "gdn"}));
  model.layers = "gdn,gdn,gdn,attn";
  model.n_layers = 2;
  EXPECT_EQ(lat::layer_mixers(model), (std::vector<std::string>{"gdn", "gdn"}));
}

}  // namespace

namespace {

TEST(Config, ModelKeysDifferingNamesEachModelKeyWithBothValues) {
  const lat::Config init = lat::parse_config(
      "data.path: c.txt\nmodel:\n  layers: gdn,attn\n  attn: {n_heads: 8, output_gate: true}\n  norm_eps: 1.0e-5\n",
      "init.yaml");
  const lat::Config now =
      lat::parse_config("data.path: other.txt\nmodel.layers: gdn,gdn,gdn,attn\ntrain.lr: 0.01\n", "run.yaml");
  // data.* and train.* are not the model's; resolved keys (attn.n_kv_heads) follow attn.n_heads.
  EXPECT_EQ(lat::model_keys_differing(init, now),
            (std::vector<std::string>{"model.layers: 'gdn,attn' (init_from) vs 'gdn,gdn,gdn,attn' (this run)",
                                      "model.norm_eps: 1e-05 (init_from) vs 1e-06 (this run)",
                                      "model.attn.n_heads: 8 (init_from) vs 4 (this run)",
                                      "model.attn.n_kv_heads: 8 (init_from) vs 4 (this run)",
                                      "model.attn.output_gate: true (init_from) vs false (this run)"}));
  EXPECT_TRUE(lat::model_keys_differing(now, now).empty());
}

}  // namespace
