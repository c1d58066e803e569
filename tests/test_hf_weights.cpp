// The weight files of a Hugging Face directory (hf_shards.h, hf_import.h): a sharded
// model.safetensors.index.json read as the whole file would be, and every way the index and
// its shards can disagree refused with one line naming the index, the tensor and the shard(s);
// errors about weights naming the tensor as the file does (not lat's name); overlapping
// safetensors offsets naming both tensors.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <source_location>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "layers/hybrid_lm.h"
#include "tests/expect_error.h"
#include "tests/hf_test_model.h"
#include "tests/test_files.h"
#include "train/config/model_config.h"
#include "train/files/hf_weights.h"
#include "train/files/model_reader.h"
#include "train/files/safetensors.h"
#include "train/run/finetune.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

const std::string kShard1 = "model-00001-of-00002.safetensors";
const std::string kShard2 = "model-00002-of-00002.safetensors";

bool bit_equal(const lat::Tensor& a, const lat::Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

/// The tensors of `tensors` named `name`, with element `index` set to `value`.
lat::NamedTensors with_value(lat::NamedTensors tensors, const std::string& name, int64_t index, float value) {
  for (auto& [n, t] : tensors)
    if (n == name) {
      std::vector<float> v = t.to_vector<float>();
      v[static_cast<size_t>(index)] = value;
      t = lat::Tensor::from_vector(v, t.shape());
    }
  return tensors;
}

class HfWeightsTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    expected_ = write_hf_dir(path("qwen"), kQwenShape, 50);
    whole_ = lat::load_safetensors(path("qwen/model.safetensors")).tensors;
  }

  /// Replaces qwen/model.safetensors by two f32 shards (the last tensor, lm_head.weight,
  /// alone in the second) and their index; returns the index.
  nlohmann::json shard() {
    fs::remove(path("qwen/model.safetensors"));
    index_ = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
    shards_[0].assign(whole_.begin(), whole_.end() - 1);
    shards_[1].assign(whole_.end() - 1, whole_.end());
    EXPECT_EQ(shards_[1].front().first, "lm_head.weight");
    for (int s = 0; s < 2; ++s)
      for (const auto& [name, t] : shards_[s]) index_["weight_map"][name] = s == 0 ? kShard1 : kShard2;
    write_shards();
    write_index(index_);
    return index_;
  }

  void write_shards() const {
    lat::save_safetensors(path("qwen/" + kShard1), shards_[0]);
    lat::save_safetensors(path("qwen/" + kShard2), shards_[1]);
  }

  void write_index(const nlohmann::json& index) const { write("qwen/model.safetensors.index.json", index.dump()); }

  std::string index_path() const { return path("qwen/model.safetensors.index.json"); }

  /// load_model_weights(DIR) must throw a lat::Error naming the index and each of `parts`.
  void expect_index_error(std::initializer_list<std::string_view> parts,
                          std::source_location where = std::source_location::current()) const {
    const std::string message = expect_error([&] { lat::load_model_weights(path("qwen")); }, parts, where);
    EXPECT_TRUE(contains(message, "load_model_weights: '" + index_path() + "': ")) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }

  lat::NamedTensors expected_, whole_;
  lat::NamedTensors shards_[2];
  nlohmann::json index_;
};

TEST_F(HfWeightsTest, ShardedWeightsAreTheWholeFilesBitForBit) {
  shard();
  const lat::ModelWeights w = lat::load_model_weights(path("qwen"));
  EXPECT_EQ(w.path, index_path());
  ASSERT_EQ(w.checkpoint.model.size(), expected_.size());
  for (const auto& [name, t] : expected_) {
    const auto it = std::find_if(w.checkpoint.model.begin(), w.checkpoint.model.end(),
                                 [&name = name](const auto& n) { return n.first == name; });
    ASSERT_NE(it, w.checkpoint.model.end()) << name;
    EXPECT_TRUE(bit_equal(it->second, t)) << name;
  }
}

TEST_F(HfWeightsTest, TensorTheIndexDoesNotListIsAnError) {
  nlohmann::json index = shard();
  index["weight_map"].erase("model.embed_tokens.weight");
  write_index(index);
  expect_index_error(
      {"tensor 'model.embed_tokens.weight' is in shard '" + kShard1 + "', but weight_map does not list it"});
}

TEST_F(HfWeightsTest, TensorInAnotherShardThanListedIsAnError) {
  nlohmann::json index = shard();
  index["weight_map"]["lm_head.weight"] = kShard1;
  index["weight_map"]["model.embed_tokens.weight"] = kShard2;  // kShard2 is still read
  write_index(index);
  expect_index_error({"tensor 'model.embed_tokens.weight' is in shard '" + kShard1 +
                      "', but weight_map places it in '" + kShard2 + "'"});
}

TEST_F(HfWeightsTest, TensorListedButNotInItsShardIsAnError) {
  nlohmann::json index = shard();
  index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = kShard2;
  write_index(index);
  expect_index_error({"weight_map places tensor 'model.layers.9.mlp.up_proj.weight' in shard '" + kShard2 +
                      "', which does not hold it"});
}

TEST_F(HfWeightsTest, TensorListedTwiceNamesBothShards) {
  shard();
  // nlohmann::json cannot hold a key twice: the index is written as text.
  std::string text = index_.dump();
  const std::string entry = "\"lm_head.weight\":\"" + kShard2 + "\"";
  ASSERT_NE(text.find(entry), std::string::npos);
  text.replace(text.find(entry), entry.size(), entry + ",\"lm_head.weight\":\"" + kShard1 + "\"");
  write("qwen/model.safetensors.index.json", text);
  expect_index_error(
      {"weight_map lists tensor 'lm_head.weight' twice, in shards '" + kShard2 + "' and '" + kShard1 + "'"});
}

TEST_F(HfWeightsTest, ShardThatDoesNotExistIsNamed) {
  nlohmann::json index = shard();
  fs::remove(path("qwen/" + kShard2));
  expect_index_error({"weight_map 'lm_head.weight': shard '" + kShard2 + "' does not exist"});
  index["weight_map"]["lm_head.weight"] = "model-00003-of-00003.safetensors";
  write_shards();
  write_index(index);
  expect_index_error({"weight_map 'lm_head.weight': shard 'model-00003-of-00003.safetensors' does not exist"});
  index["weight_map"]["lm_head.weight"] = std::string(300, 'x');  // longer than a file name may be
  write_index(index);
  expect_index_error({"weight_map 'lm_head.weight': shard 'xxxxxxxxxx", "' does not exist"});
}

TEST_F(HfWeightsTest, ShardNamesOutsideTheDirectoryAreRefused) {
  nlohmann::json index = shard();
  for (const nlohmann::json& name :
       {nlohmann::json("/etc/passwd"), nlohmann::json("../" + kShard2), nlohmann::json("sub/" + kShard2),
        nlohmann::json(".."), nlohmann::json("."), nlohmann::json(""), nlohmann::json("a\\b.safetensors"),
        nlohmann::json(kShard2 + std::string(1, '\0') + ".txt"), nlohmann::json(2)}) {
    SCOPED_TRACE(name.dump());
    index["weight_map"]["lm_head.weight"] = name;
    write_index(index);
    expect_index_error({"weight_map 'lm_head.weight': expected a file name in the same directory, got "});
  }
}

TEST_F(HfWeightsTest, TensorInTwoShardsNamesBoth) {
  shard();
  shards_[1].push_back(shards_[0].front());  // model.embed_tokens.weight, listed in kShard1
  write_shards();
  expect_index_error({"tensor 'model.embed_tokens.weight' is in two shards, '" + kShard1 + "' and '" + kShard2 +
                      "' (weight_map places it in '" + kShard1 + "')"});
}

TEST_F(HfWeightsTest, IndexWithoutWeightMapIsAnError) {
  shard();
  write_index({{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::array({"a", "b"})}});
  expect_index_error({"expected an object with 'weight_map': {tensor: shard file}"});
}

TEST_F(HfWeightsTest, NonFiniteWeightIsNamedAsTheFileNamesIt) {
  const std::string q = "model.layers.3.self_attn.q_proj.weight";
  lat::save_safetensors(path("qwen/model.safetensors"),
                        with_value(whole_, q, 5, std::numeric_limits<float>::quiet_NaN()));
  const std::string message = expect_error([&] { lat::load_model_weights(path("qwen")); },
                                           {"load_model_weights: '" + path("qwen/model.safetensors") + "': tensor '" +
                                            q + "' [128, 32] holds nan at element 5: expected finite weights"});
  EXPECT_FALSE(contains(message, "layers.3.attn.q_proj")) << message;  // lat's name

  // In a shard: the shard is named.
  shard();
  shards_[1] = with_value(shards_[1], "lm_head.weight", 31, -std::numeric_limits<float>::infinity());
  write_shards();
  expect_error([&] { lat::load_model_weights(path("qwen")); }, {"load_model_weights: '" + path("qwen/" + kShard2) +
                                                                "': tensor 'lm_head.weight' [50, 32] holds -inf"
                                                                " at element 31"});
}

TEST_F(HfWeightsTest, TiedLmHeadThatIsNotACopyIsNamedAsTheFileNamesIt) {
  const std::string tied = kQwenShape + "  tie_embeddings: true\n";
  write_hf_dir(path("tied"), tied, 50);
  lat::NamedTensors tensors = lat::load_safetensors(path("tied/model.safetensors")).tensors;
  const lat::Tensor embeddings = tensors.front().second;
  ASSERT_EQ(tensors.front().first, "model.embed_tokens.weight");
  tensors.emplace_back("lm_head.weight", embeddings);  // an exact copy: read, and dropped
  lat::save_safetensors(path("tied/model.safetensors"), tensors);
  const lat::ModelWeights w = lat::load_model_weights(path("tied"));
  EXPECT_EQ(w.checkpoint.model.size(), expected_.size() - 1);  // no lm_head of its own

  tensors.back().second = lat::Tensor::zeros({50, 32});
  lat::save_safetensors(path("tied/model.safetensors"), tensors);
  expect_error([&] { lat::load_model_weights(path("tied")); },
               {"load_model_weights: '" + path("tied/model.safetensors") +
                "': tensor 'lm_head.weight' [50, 32] is not a copy of 'model.embed_tokens.weight' [50, 32], but "
                "config.json sets tie_word_embeddings: true"});
}

TEST_F(HfWeightsTest, TokenizerLargerThanTheEmbeddingsNamesTheFilesTensor) {
  write_hf_dir(path("small"), kQwenShape, 10);  // kVocab has 12 characters
  const std::string message = expect_error([&] { lat::load_model_weights(path("small")); },
                                           {"has 12 tokens, but 'model.embed_tokens.weight' [10, 32] has 10 rows"});
  EXPECT_FALSE(contains(message, "'embeddings.weight'")) << message;
}

TEST_F(HfWeightsTest, InitFromListsAMismatchUnderBothNames) {
  const lat::ModelWeights w = lat::load_model_weights(path("qwen"));
  std::string narrower = kQwenShape;
  narrower.replace(narrower.find("intermediate_size: 64"), 21, "intermediate_size: 48");
  lat::Generator gen(1);
  const lat::HybridLM model(lat::hybrid_lm_config(model_config(narrower).model, 50), gen);
  expect_error([&] { lat::init_from_weights(model, w, true); },
               {"init_from '" + path("qwen/model.safetensors") + "' does not fit the model",
                "layers.0.mlp.gate_proj.weight ('model.layers.0.mlp.gate_proj.weight' in the file): checkpoint [64, "
                "32], model [48, 32]"});
}

TEST(HfTensorLabels, StackedPartsNameTheirRowsOfTheFilesTensor) {
  const std::map<std::string, std::string> labels = lat::hf_tensor_labels(model_config(kQwenShape).model, 50);
  // H*K = 2*8 rows of q, then of k, then Hv*V = 4*16 of v.
  EXPECT_EQ(labels.at("layers.0.attn.q_proj.weight"), "'model.layers.0.linear_attn.in_proj_qkv.weight' rows [0, 16)");
  EXPECT_EQ(labels.at("layers.0.attn.k_proj.weight"), "'model.layers.0.linear_attn.in_proj_qkv.weight' rows [16, 32)");
  EXPECT_EQ(labels.at("layers.2.attn.v_conv1d.weight"), "'model.layers.2.linear_attn.conv1d.weight' rows [32, 96)");
  EXPECT_EQ(labels.at("layers.3.attn.q_proj.weight"), "'model.layers.3.self_attn.q_proj.weight'");
  EXPECT_EQ(labels.at("embeddings.weight"), "'model.embed_tokens.weight'");
  EXPECT_EQ(labels.size(), random_lat_tensors(model_config(kQwenShape).model, 50).size());
}

TEST_F(HfWeightsTest, OverlappingOffsetsNameBothTensors) {
  // 'b' comes first in the header but starts later: the message names both, in data order.
  const std::string header = R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  write_bytes(path("qwen/model.safetensors"), bytes + header + std::string(12, '\0'));
  expect_error([&] { lat::load_model_weights(path("qwen")); },
               {"load_safetensors: '" + path("qwen/model.safetensors") +
                "': tensors 'a' data_offsets [0, 8] and 'b' data_offsets [4, 12] overlap"});
}

}  // namespace
