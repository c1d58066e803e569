// Fuzzes the reader of sharded Hugging Face weights: load_hf_shards on a
// model.safetensors.index.json (the whole input) beside two fixed, valid shards, so that
// inputs naming them get past the index checks to the comparison of the index with the shards.
// The seeds (corpus/hf_index/, written by hand as save_pretrained writes an index) name these
// shards and their tensors.
//
// lat::Error is the expected answer to bad files; anything else escaping, a crash, a sanitizer
// report, a hang or a huge allocation is a finding.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "lat/error.h"
#include "lat/tensor.h"
#include "tests/fuzz/fuzz_files.h"
#include "train/files/hf_shards.h"
#include "train/files/safetensors.h"

namespace {

/// The directory of the index, with its two shards written once: model.embed_tokens.weight
/// [2, 2] and model.norm.weight [2] in model-00001-of-00002.safetensors, lm_head.weight
/// [2, 2] in model-00002-of-00002.safetensors.
const std::filesystem::path& model_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = lat::fuzz::scratch_dir() / "hf_index";
    std::filesystem::create_directories(d);
    lat::save_safetensors((d / "model-00001-of-00002.safetensors").string(),
                          {{"model.embed_tokens.weight", lat::Tensor::from_vector({1, 2, 3, 4}, {2, 2})},
                           {"model.norm.weight", lat::Tensor::from_vector({0.5f, -0.5f}, {2})}});
    lat::save_safetensors((d / "model-00002-of-00002.safetensors").string(),
                          {{"lm_head.weight", lat::Tensor::from_vector({4, 3, 2, 1}, {2, 2})}});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path index = model_dir() / "model.safetensors.index.json";
  lat::fuzz::write_file(index, data, size);
  try {
    lat::load_hf_shards(index.string());
  } catch (const lat::Error&) {
  }
  return 0;
}
