// Small Hugging Face Qwen3.5 models written from C++ as transformers lays them out, shared by
// the tests of the format (test_hf_format.cpp) and of its weight files (test_hf_weights.cpp).
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/test_files.h"
#include "train/files/hf_config.h"
#include "train/files/hf_tokenizer.h"
#include "train/files/hf_weights.h"
#include "train/files/safetensors.h"

namespace lat::testing {

// The shape of the transformers-made tiny model: 3 linear layers (2 key heads of 8, 4 value
// heads of 16), one gated attention layer (4 heads of 16, 2 kv heads, half rotary).
inline const std::string kQwenShape =
    "  d_model: 32\n  n_layers: 4\n  n_heads: 2\n  head_dim: 8\n  expand_v: 2.0\n"
    "  layers: \"gdn,gdn,gdn,attn\"\n  intermediate_size: 64\n  norm_zero_centered: true\n"
    "  linear: {n_v_heads: 4, chunk_size: 4}\n"
    "  attn: {n_heads: 4, head_dim: 16, n_kv_heads: 2, output_gate: true, qk_norm: true, rope_fraction: 0.5}\n";

// 12 characters, one of them two bytes in UTF-8.
inline const std::string kVocab = "\n abcdefghi\xc3\xa9";

/// Seeded random values for every lat tensor of `m`'s layout, once each (norms around 0).
inline NamedTensors random_lat_tensors(const ModelConfig& m, int64_t vocab_size) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  NamedTensors tensors;
  for (const HfTensorSpec& spec : hf_tensor_layout(m, vocab_size))
    for (const HfTensorPart& part : spec.parts) {
      // A tensor the layout holds twice (kimi's tied lm_head is the embeddings) is made once.
      bool made = false;
      for (const auto& [name, t] : tensors) made = made || name == part.lat_name;
      if (made) continue;
      int64_t n = 1;
      for (int64_t s : part.shape) n *= s;
      std::vector<float> data(static_cast<size_t>(n));
      for (float& x : data) x = normal(rng);
      tensors.emplace_back(part.lat_name, Tensor::from_vector(data, part.shape));
    }
  return tensors;
}

/// A Hugging Face directory `dir` of `shape` (model YAML lines) with random_lat_tensors'
/// values in model.safetensors, config.json and the char tokenizer of kVocab; returns the lat
/// tensors.
inline NamedTensors write_hf_dir(const std::filesystem::path& dir, const std::string& shape, int64_t vocab_size) {
  const ModelConfig m = model_config(shape).model;
  const NamedTensors lat_tensors = random_lat_tensors(m, vocab_size);
  std::filesystem::create_directories(dir);
  save_safetensors((dir / "model.safetensors").string(), hf_tensors_from_lat(m, vocab_size, lat_tensors, "t"),
                   SafetensorsDType::f32, {{"format", "pt"}});
  std::ofstream(dir / "config.json") << hf_config_json(m, vocab_size, SafetensorsDType::f32).dump(2);
  std::ofstream(dir / "tokenizer.json") << hf_tokenizer_json(Tokenizer::char_from_vocab(kVocab)).dump();
  return lat_tensors;
}

}  // namespace lat::testing
