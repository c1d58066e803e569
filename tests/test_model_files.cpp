// Model files checked against themselves before a model is built from them (model_reader.h,
// trained_model.h, info.h): the stored config through the validator and its bounds, the sizes
// the config asks for against the tensors that hold them, the tokenizer against the
// embeddings, a tied config beside an lm_head, finite weights; and `lat generate`, `eval` and
// `info` on such files exit 1 or 2 with one error line, leaving the files as they were.
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lat/ops.h"
#include "layers/hybrid_lm.h"
#include "layers/swiglu.h"
#include "tests/expect_error.h"
#include "tests/lat_command.h"
#include "tests/test_files.h"
#include "train/config/model_config.h"
#include "train/files/checkpoint.h"
#include "train/files/export.h"
#include "train/files/model_reader.h"
#include "train/files/safetensors.h"
#include "train/files/trained_model.h"
#include "train/inference/eval.h"
#include "train/inference/generate.h"
#include "train/inference/info.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

// 13 characters: the model below has 13 embedding rows.
const std::string kVocab = "abcdefgh ijk\n";
constexpr int64_t kRows = 13;

class ModelFilesTest : public TempDirTest {
 protected:
  /// The resolved config of a small gdn + attention model (d_model 16, 2 heads of 8).
  static lat::Config tiny_config() {
    return lat::parse_config(
        "model: {d_model: 16, n_layers: 2, n_heads: 2, layers: \"gdn,attn\"}\ndata: {path: x.txt}\n"
        "train: {threads: 1}\n",
        "tiny.yaml");
  }

  /// A checkpoint of a freshly initialized tiny model: its weights, tokenizer (kVocab) and the
  /// stored config `config` (which may hold values the validator rejects: to_yaml does not
  /// check).
  static lat::Checkpoint tiny_checkpoint(const lat::Config& config = tiny_config()) {
    lat::Generator gen(3);
    const lat::HybridLM model(lat::hybrid_lm_config(tiny_config().model, kRows), gen);
    lat::Checkpoint c;
    c.step = 4;
    c.config_yaml = lat::to_yaml(config);
    c.tokenizer_type = "char";
    c.tokenizer_vocab = kVocab;
    for (const auto& [name, t] : model.named_parameters()) c.model.emplace_back(name, t.detach().clone());
    return c;
  }

  /// tiny_config() changed by `edit`.
  static lat::Config edited(const std::function<void(lat::Config&)>& edit) {
    lat::Config c = tiny_config();
    edit(c);
    return c;
  }

  /// Saves `c` as dir_/name and returns the path.
  std::string save(const std::string& name, const lat::Checkpoint& c) const {
    lat::save_checkpoint(path(name), c);
    return path(name);
  }

  /// The safetensors export of the checkpoint `ckpt` in dir_/out_dir; returns its
  /// model.safetensors.
  std::string export_of(const std::string& ckpt, const std::string& out_dir) const {
    lat::export_model({ckpt, "safetensors", path(out_dir), "f32", {}});
    return path(out_dir + "/model.safetensors");
  }

  /// Rewrites the export's model.safetensors with `tensors`, keeping its metadata.
  static void rewrite_tensors(const std::string& safetensors,
                              const std::vector<std::pair<std::string, lat::Tensor>>& tensors) {
    const lat::SafetensorsFile file = lat::load_safetensors(safetensors);
    lat::save_safetensors(safetensors, tensors, lat::SafetensorsDType::f32, file.metadata);
  }

  /// Every file under dir_ with its bytes.
  std::map<std::string, std::string> snapshot() const {
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(dir_))
      if (entry.is_regular_file()) files[entry.path().string()] = read_bytes(entry.path());
    return files;
  }

  /// Runs build/lat with `args` (shell words), stdout and stderr captured outside dir_.
  CliResult run_lat(const std::string& args) const {
    const fs::path capture = dir_.string() + "_capture";
    fs::create_directories(capture);
    CliResult r = run_lat_captured(args, capture);
    fs::remove_all(capture);
    return r;
  }

  /// `lat <command> <model>` exits `code` with one line "error: ..." holding every part,
  /// prints nothing on stdout and changes no file.
  void expect_cli_error(const std::string& command, const std::string& model, int code,
                        std::initializer_list<std::string_view> parts) const {
    const auto before = snapshot();
    const std::map<std::string, std::string> args = {{"generate", "generate --checkpoint '" + model + "'"},
                                                     {"eval", "eval --checkpoint '" + model + "'"},
                                                     {"info", "info '" + model + "'"}};
    const CliResult r = run_lat(args.at(command));
    EXPECT_EQ(r.exit_code, code) << command << ": " << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << command << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << command << ": one line: " << r.err;
    for (std::string_view part : parts) EXPECT_TRUE(contains(r.err, std::string(part))) << command << ": " << r.err;
    EXPECT_EQ(r.out, "") << command;
    EXPECT_EQ(snapshot(), before) << command << ": a file changed";
  }

  /// generate, eval and info on `model` each fail as expect_cli_error says.
  void expect_every_command_fails(const std::string& model, int code,
                                  std::initializer_list<std::string_view> parts) const {
    for (const char* command : {"generate", "eval", "info"}) expect_cli_error(command, model, code, parts);
  }
};

/// `tensors` with `name`'s tensor replaced by `value`.
std::vector<std::pair<std::string, lat::Tensor>> with_tensor(std::vector<std::pair<std::string, lat::Tensor>> tensors,
                                                             const std::string& name, const lat::Tensor& value) {
  for (auto& [n, t] : tensors)
    if (n == name) t = value;
  return tensors;
}

/// A copy of `t` with element `index` set to `value`.
lat::Tensor with_element(const lat::Tensor& t, int64_t index, float value) {
  std::vector<float> data = t.to_vector<float>();
  data.at(static_cast<size_t>(index)) = value;
  return lat::Tensor::from_vector(data, t.shape());
}

// ---- the stored config goes through the validator and its bounds --------------------------

TEST_F(ModelFilesTest, StoredConfigValuesOutsideTheBoundsAreConfigErrorsNamingFileAndKey) {
  struct Case {
    std::function<void(lat::Config&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](lat::Config& c) { c.train.threads = 100000; }, "train.threads: expected an int in [0, 1024], got 100000"},
      {[](lat::Config& c) { c.model.n_layers = 1000000; }, "model.n_layers: expected an int in [1, 1024], got 1000000"},
      {[](lat::Config& c) { c.model.vocab_size = int64_t{1} << 30; },
       "model.vocab_size: expected an int in [0, 16777216], got 1073741824"},
      {[](lat::Config& c) { c.model.mlp_ratio = 1e6; }, "model.mlp_ratio: expected a float in (0, 64], got 1e+06"},
      {[](lat::Config& c) { c.model.linear.conv_size = 1000000; },
       "model.linear.conv_size: expected an int in [1, 64], got 1000000"},
      {[](lat::Config& c) { c.model.linear.chunk_size = 1000000; },
       "model.linear.chunk_size: expected an int in [1, 1024], got 1000000"},
  };
  for (const Case& c : cases) {
    const std::string ckpt = save("ckpt.h5", tiny_checkpoint(edited(c.edit)));
    const auto before = snapshot();
    expect_error<lat::ConfigError>([&] { lat::load_trained_model(ckpt); },
                                   {"'" + ckpt + "': " + c.expected + " (/config:"});
    expect_error<lat::ConfigError>([&] { lat::inspect(ckpt, 16); }, {"'" + ckpt + "': " + c.expected});
    EXPECT_EQ(snapshot(), before);
  }
  // Through the CLI: a config error, exit 2, for each command.
  const std::string ckpt = save("threads.h5",
                                tiny_checkpoint(edited([](lat::Config& c) { c.train.threads = 100000; })));
  expect_every_command_fails(ckpt, 2, {"'" + ckpt + "': train.threads: expected an int in [0, 1024], got 100000"});
}

TEST_F(ModelFilesTest, AnExportsLatConfigGoesThroughTheValidatorToo) {
  const std::string st = export_of(save("ckpt.h5", tiny_checkpoint()), "out");
  const std::string config_json = path("out/config.json");
  nlohmann::json j = nlohmann::json::parse(read_bytes(config_json));
  j["lat_config"] = lat::to_yaml(edited([](lat::Config& c) { c.model.n_layers = 1000000; }));
  write_bytes(config_json, j.dump(2));
  expect_error<lat::ConfigError>(
      [&] { lat::load_model_weights(st); },
      {"'" + config_json + "': model.n_layers: expected an int in [1, 1024], got 1000000 (lat_config:"});
  expect_every_command_fails(st, 2, {"'" + config_json + "': model.n_layers: expected an int in [1, 1024]"});
}

// ---- the sizes the config asks for against the tensors, before the model is built ---------

TEST_F(ModelFilesTest, ConfigAskingForMoreThanTheFileHoldsIsAnErrorBeforeTheModelIsBuilt) {
  // Each config is valid on its own; each asks for a model the weights do not describe. The
  // first would allocate 2 x 2^24 x 16 floats (2 GiB) if the model were built before the check.
  const int64_t wide_mlp = lat::swiglu_hidden_size(16, 64.0);
  struct Case {
    std::function<void(lat::Config&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](lat::Config& c) { c.model.vocab_size = int64_t{1} << 24; },
       "model.vocab_size 16777216 does not match tensor 'embeddings.weight' [13, 16]: expected 16777216 rows, found "
       "13"},
      {[](lat::Config& c) { c.model.d_model = 32; },
       "model.d_model 32 does not match tensor 'embeddings.weight' [13, 16]: expected 32 columns, found 16"},
      {[](lat::Config& c) { c.model.n_layers = 1024; },
       "model.n_layers 1024 does not match the tensors: expected 1024 layers, found 2 (layers.0 .. layers.1)"},
      {[](lat::Config& c) { c.model.mlp_ratio = 64.0; },
       "model.mlp_ratio 64 (with model.d_model 16) does not match tensor 'layers.0.mlp.gate_proj.weight' [64, 16]: "
       "expected " +
           std::to_string(wide_mlp) + " rows (the SwiGLU hidden width), found 64"},
      {[](lat::Config& c) { c.model.head_dim = 64; },
       "model.n_heads 2 x model.head_dim 64 does not match tensor 'layers.0.attn.q_proj.weight' [16, 16]: expected 128 "
       "rows, found 16"},
      {[](lat::Config& c) { c.model.expand_v = 4.0; },
       "model.n_heads 2 x value head dim 32 (model.head_dim x model.expand_v, gdn layer) does not match tensor "
       "'layers.0.attn.o_proj.weight' [16, 16]: expected 64 columns, found 16"},
      {[](lat::Config& c) { c.model.linear.conv_size = 64; },
       "model.linear.conv_size 64 does not match tensor 'layers.0.attn.q_conv1d.weight' [16, 1, 4]: expected 64 "
       "taps, found 4"},
  };
  for (const Case& c : cases) {
    const std::string ckpt = save("ckpt.h5", tiny_checkpoint(edited(c.edit)));
    const std::string st = export_of(save("good.h5", tiny_checkpoint()), "out");
    nlohmann::json j = nlohmann::json::parse(read_bytes(path("out/config.json")));
    j["lat_config"] = lat::to_yaml(edited(c.edit));
    write_bytes(path("out/config.json"), j.dump(2));
    const auto before = snapshot();
    for (const std::string& file : {ckpt, st}) {
      const std::string expected = "model_from_weights: '" + file + "': " + c.expected;
      EXPECT_EQ(expect_error([&] { lat::load_trained_model(file); }, {expected}), expected);
      expect_error([&] { lat::inspect(file, 16); }, {expected});
      expect_error([&] { lat::export_model({file, "h5-weights", path("x"), "f32", {}}); }, {expected});
    }
    EXPECT_FALSE(fs::exists(path("x")));
    EXPECT_EQ(snapshot(), before);
  }
  const std::string ckpt = save("layers.h5", tiny_checkpoint(edited([](lat::Config& c) { c.model.n_layers = 1024; })));
  expect_every_command_fails(ckpt, 1, {"'" + ckpt + "': model.n_layers 1024 does not match the tensors"});
}

TEST_F(ModelFilesTest, AMissingSizeTensorIsNamedBeforeTheModelIsBuilt) {
  lat::Checkpoint c = tiny_checkpoint();
  std::erase_if(c.model, [](const auto& t) { return t.first == "layers.1.mlp.gate_proj.weight"; });
  const std::string ckpt = save("ckpt.h5", c);
  expect_error([&] { lat::load_trained_model(ckpt); },
               {"model_from_weights: '" + ckpt + "' has no tensor 'layers.1.mlp.gate_proj.weight'"});
}

// ---- tokenizer, tied embeddings ---------------------------------------------------------

TEST_F(ModelFilesTest, ATokenizerOfAnotherSizeThanTheEmbeddingsIsAnError) {
  lat::Checkpoint more = tiny_checkpoint();
  more.tokenizer_vocab = kVocab + "z";  // 14 characters for 13 rows
  const std::string ckpt = save("more.h5", more);
  const std::string expected = "load_model_weights: '" + ckpt + "': the char tokenizer ('" + ckpt +
                               "' /tokenizer) has 14 tokens, but 'embeddings.weight' [13, 16] has 13 rows: expected "
                               "as many tokens as rows (model.vocab_size 0: the vocabulary is the tokenizer's)";
  EXPECT_EQ(expect_error([&] { lat::load_model_weights(ckpt); }, {expected}), expected);
  expect_every_command_fails(ckpt, 1, {expected});

  // Fewer tokens than rows: not the tokenizer this model was sized from.
  lat::Checkpoint fewer = tiny_checkpoint();
  fewer.tokenizer_vocab = kVocab.substr(1);
  const std::string fewer_path = save("fewer.h5", fewer);
  expect_error([&] { lat::load_model_weights(fewer_path); }, {"has 12 tokens, but 'embeddings.weight' [13, 16]"});
  // ... unless model.vocab_size sets the rows: a vocabulary padded beyond the tokenizer.
  lat::Checkpoint padded = tiny_checkpoint(edited([](lat::Config& c) { c.model.vocab_size = kRows; }));
  padded.tokenizer_vocab = kVocab.substr(1);
  EXPECT_EQ(lat::load_trained_model(save("padded.h5", padded)).model->vocab_size(), kRows);
  padded.tokenizer_vocab = kVocab + "z";
  const std::string over = save("over.h5", padded);
  expect_error([&] { lat::load_model_weights(over); }, {"has 14 tokens", "expected at most as many tokens as rows"});

  // An export's tokenizer.json is named.
  const std::string st = export_of(save("good.h5", tiny_checkpoint()), "out");
  nlohmann::json tok = nlohmann::json::parse(read_bytes(path("out/tokenizer.json")));
  tok["vocab"].push_back("z");
  write_bytes(path("out/tokenizer.json"), tok.dump());
  expect_error([&] { lat::load_model_weights(st); },
               {"'" + st + "': the char tokenizer ('" + path("out/tokenizer.json") + "') has 14 tokens"});
}

TEST_F(ModelFilesTest, ATiedConfigBesideATrainedLmHeadIsAnErrorAndAnExactCopyLoads) {
  const lat::Config tied = edited([](lat::Config& c) { c.model.tie_embeddings = true; });
  lat::Checkpoint c = tiny_checkpoint(tied);
  std::erase_if(c.model, [](const auto& t) { return t.first == "lm_head.weight"; });
  const std::string st = export_of(save("tied.h5", c), "out");
  // lat's export writes an exact copy for other tools: it loads, and is dropped.
  const lat::ModelWeights w = lat::load_model_weights(st);
  EXPECT_EQ(w.checkpoint.model.size(), c.model.size());
  EXPECT_EQ(lat::load_trained_model(st).model->named_parameters().size(), c.model.size());

  // A trained lm_head (one value differs) would be discarded silently: an error naming both.
  const lat::SafetensorsFile file = lat::load_safetensors(st);
  rewrite_tensors(st, with_tensor(file.tensors, "lm_head.weight", with_element(file.at("lm_head.weight"), 7, 0.5f)));
  const std::string expected = "load_model_weights: '" + st +
                               "': tensor 'lm_head.weight' [13, 16] is not a copy of "
                               "'embeddings.weight' [13, 16], but '" +
                               path("out/config.json") + "' lat_config sets model.tie_embeddings: true";
  expect_error([&] { lat::load_model_weights(st); }, {expected});
  expect_every_command_fails(st, 1, {expected});

  // The same in a checkpoint.
  lat::Checkpoint trained_head = tiny_checkpoint(tied);
  const std::string ckpt = save("head.h5", trained_head);
  expect_error(
      [&] { lat::load_model_weights(ckpt); },
      {"'" + ckpt + "': tensor 'lm_head.weight' [13, 16] is not a copy of 'embeddings.weight' [13, 16], but '" + ckpt +
       "' /config sets model.tie_embeddings: true"});
}

// ---- lat info validates what it reports -------------------------------------------------

TEST_F(ModelFilesTest, InfoRejectsWrongShapedMissingAndExtraTensors) {
  const lat::Checkpoint good = tiny_checkpoint();
  const std::string good_path = save("good.h5", good);
  const CliResult ok = run_lat("info '" + good_path + "'");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(contains(ok.out, "checkpoint " + good_path)) << ok.out;

  struct Case {
    std::string name;
    std::function<void(lat::Checkpoint&)> damage;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"q_proj.h5",
       [](lat::Checkpoint& c) {
         c.model = with_tensor(c.model, "layers.1.attn.q_proj.weight", lat::Tensor::zeros({15, 16}));
       },
       "model.attn.n_heads 2 x model.attn.head_dim 8 does not match tensor 'layers.1.attn.q_proj.weight' [15, 16]: "
       "expected 16 "
       "rows, "
       "found 15"},
      {"k_proj.h5",
       [](lat::Checkpoint& c) {
         c.model = with_tensor(c.model, "layers.1.attn.k_proj.weight", lat::Tensor::zeros({16, 15}));
       },
       "load_weights: '%': 'layers.1.attn.k_proj.weight': expected shape [16, 16], got [16, 15]"},
      {"missing.h5",
       [](lat::Checkpoint& c) {
         std::erase_if(c.model, [](const auto& t) { return t.first == "layers.0.attn.o_norm.weight"; });
       },
       "load_weights: '%' has no tensor 'layers.0.attn.o_norm.weight'"},
      {"extra.h5",
       [](lat::Checkpoint& c) { c.model.emplace_back("layers.0.attn.extra.weight", lat::Tensor::zeros({4})); },
       "load_weights: '%': tensor 'layers.0.attn.extra.weight' is not a parameter of this model"},
  };
  for (const Case& c : cases) {
    lat::Checkpoint damaged = good;
    c.damage(damaged);
    const std::string file = save(c.name, damaged);
    std::string expected = c.expected;
    if (const size_t at = expected.find('%'); at != std::string::npos) expected.replace(at, 1, file);
    expect_error([&] { lat::inspect(file, 16); }, {file, expected});
    expect_cli_error("info", file, 1, {expected});
  }
}

// ---- finite weights, every format ----------------------------------------------------------

TEST_F(ModelFilesTest, NanOrInfInAWeightIsAnErrorNamingTheTensor) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::string name = "layers.1.mlp.up_proj.weight";
  lat::Checkpoint c = tiny_checkpoint();
  for (auto& [n, t] : c.model)
    if (n == name) t = with_element(t, 37, inf);
  const std::string ckpt = save("inf.h5", c);
  expect_error([&] { lat::load_model_weights(ckpt); }, {ckpt, name, "inf"});
  expect_every_command_fails(ckpt, 1, {ckpt, name, "inf"});

  const std::string st = export_of(save("good.h5", tiny_checkpoint()), "out");
  const lat::SafetensorsFile file = lat::load_safetensors(st);
  for (const float bad : {nan, -inf}) {
    rewrite_tensors(st, with_tensor(file.tensors, name, with_element(file.at(name), 37, bad)));
    const std::string value = std::isnan(bad) ? "nan" : "-inf";
    const std::string expected = "load_model_weights: '" + st + "': tensor '" + name + "' [64, 16] holds " + value +
                                 " at element 37: expected finite weights";
    EXPECT_EQ(expect_error([&] { lat::load_model_weights(st); }, {expected}), expected);
    expect_every_command_fails(st, 1, {expected});
  }
}

// The stored train.threads sized the training machine: generate and eval use --threads, else
// OMP_NUM_THREADS, else this machine's cores, so a checkpoint trained with 1024 threads does
// not start 1024 here.
TEST_F(ModelFilesTest, InferenceThreadsAreTheFlagElseOmpNumThreadsElseTheCores) {
  const std::string ckpt = save("threads.h5", tiny_checkpoint(edited([](lat::Config& c) { c.train.threads = 1024; })));
  std::string text;
  for (int i = 0; i < 300; ++i) text += kVocab;  // a val split of one 256-token window and more
  std::ofstream(dir_ / "val.txt") << text;
  const auto threads_of_eval = [&](int flag) {
    lat::set_num_threads(1);
    lat::evaluate_checkpoint(ckpt, path("val.txt"), flag);
    return lat::get_num_threads();
  };
  const auto threads_of_generate = [&](int flag) {
    lat::set_num_threads(1);
    lat::GenerateOptions o;
    o.checkpoint = ckpt;
    o.prompt = "abc";
    o.max_new_tokens = 2;
    o.threads = flag;
    std::ostringstream out;
    lat::generate(o, out);
    return lat::get_num_threads();
  };
  const char* inherited = std::getenv("OMP_NUM_THREADS");
  const std::optional<std::string> saved = inherited ? std::optional<std::string>(inherited) : std::nullopt;

  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(threads_of_eval(0), omp_get_num_procs()) << "eval";
  EXPECT_EQ(threads_of_generate(0), omp_get_num_procs()) << "generate";
  setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(threads_of_eval(0), 3) << "eval";
  EXPECT_EQ(threads_of_generate(0), 3) << "generate";
  EXPECT_EQ(threads_of_eval(5), 5) << "eval --threads beats OMP_NUM_THREADS";
  EXPECT_EQ(threads_of_generate(5), 5) << "generate --threads beats OMP_NUM_THREADS";
  setenv("OMP_NUM_THREADS", "0", 1);
  expect_error<lat::ConfigError>([&] { threads_of_generate(0); }, {"OMP_NUM_THREADS: expected an int in [1, 1024] (or a comma list of "
                                                 "them), got '0'"});

  if (saved) setenv("OMP_NUM_THREADS", saved->c_str(), 1);
  else unsetenv("OMP_NUM_THREADS");
}

TEST_F(ModelFilesTest, ThreadsFlagOfEvalAndGenerateIsCheckedByTheParser) {
  const std::string ckpt = save("good.h5", tiny_checkpoint());
  for (const char* command : {"eval", "generate"}) {
    const CliResult r = run_lat(std::string(command) + " --checkpoint '" + ckpt + "' --threads 0");
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "--threads: expected an int in [1, 1024], got 0")) << command << ": " << r.err;
  }
}

TEST_F(ModelFilesTest, EvalOfFiniteWeightsWhoseLogitsOverflowIsAnError) {
  // Every weight finite, but lm_head rows of 3e38 overflow the logits: no loss to print.
  lat::Checkpoint c = tiny_checkpoint();
  for (auto& [n, t] : c.model)
    if (n == "lm_head.weight") t = lat::Tensor::full(t.shape(), 3e38f);
  const std::string ckpt = save("huge.h5", c);
  std::string text;
  for (int i = 0; i < 300; ++i) text += kVocab;  // a val split of one 256-token window and more
  std::ofstream(dir_ / "val.txt") << text;
  expect_error([&] { lat::evaluate_checkpoint(ckpt, path("val.txt")); },
               {"eval: '" + ckpt + "': the loss on '" + path("val.txt") + "' is ", "outputs overflow"});
}

TEST_F(ModelFilesTest, GenerateOfFiniteWeightsWhoseLogitsOverflowIsAnError) {
  // Every weight finite, but lm_head rows of 3e38 overflow the logits: no token to sample
  // (before, generate sampled from them and printed newlines, exit 0).
  lat::Checkpoint c = tiny_checkpoint();
  for (auto& [n, t] : c.model)
    if (n == "lm_head.weight") t = lat::Tensor::full(t.shape(), 3e38f);
  const std::string ckpt = save("huge.h5", c);
  expect_cli_error("generate", ckpt, 1,
                   {"error: generate: '" + ckpt + "': the forward overflowed: the logits of position 0 hold ",
                    " (a diverged or damaged checkpoint)\n"});

  lat::GenerateOptions o;
  o.checkpoint = ckpt;
  o.prompt = "abc";
  std::ostringstream out;
  expect_error([&] { lat::generate(o, out); }, {"generate: '" + ckpt + "': the forward overflowed: the logits of "
                                                "position 2 hold "});
  EXPECT_EQ(out.str(), "abc\n") << "the prompt, then a line end before the error";
}

}  // namespace
