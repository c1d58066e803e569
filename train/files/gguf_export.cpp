// Writing a lat model as one llama.cpp GGUF file (gguf_export.h): the architecture chosen by
// model.layers, the parts every architecture shares.
#include "train/files/gguf_export.h"

#include <algorithm>
#include <map>

#include "lat/error.h"
#include "layers/swiglu.h"
#include "train/files/gguf_architecture.h"
#include "train/files/gguf_tokenizer.h"
#include "train/files/tokenizer_files.h"

namespace lat {

const GgufArchitecture& gguf_architecture_for(const ModelConfig& m) {
  const std::vector<std::string> kinds = layer_mixers(m);
  const auto has = [&](const char* kind) { return std::find(kinds.begin(), kinds.end(), kind) != kinds.end(); };
  if (has("kda") || has("mla")) return gguf_kimi_linear();
  const bool mamba2 = has("mamba2");
  return mamba2 ? gguf_granite_hybrid() : gguf_qwen35();
}

GgmlType parse_gguf_dtype(const std::string& name) {
  if (name == "f32") return GgmlType::f32;
  if (name == "f16") return GgmlType::f16;
  if (name == "bf16") return GgmlType::bf16;
  if (name == "q8_0") return GgmlType::q8_0;
  throw ConfigError("export: --dtype: expected f32, f16, bf16 or q8_0 for --format gguf, got '" + name + "'");
}

void check_gguf_expressible(const ModelConfig& m, const std::optional<Tokenizer>& tokenizer, int64_t vocab_size) {
  gguf_architecture_for(m).check(m);
  if (!tokenizer)
    throw ConfigError(
        "export --format gguf: the model has no tokenizer (it was trained on token ids): llama.cpp "
        "needs a vocabulary (expected a model trained with data.tokenizer set)");
  gguf_vocabulary(*tokenizer, vocab_size);
}

void write_gguf_export(const ModelWeights& w, int64_t vocab_size, GgmlType dtype, const std::string& path) {
  const ModelConfig& m = w.config.model;
  const std::optional<Tokenizer> tokenizer = checkpoint_tokenizer(w.checkpoint);
  LAT_CHECK(tokenizer, "export --format gguf: '" << w.path << "' has no tokenizer");
  const GgufVocabulary vocab = gguf_vocabulary(*tokenizer, vocab_size);
  const GgufArchitecture& arch = gguf_architecture_for(m);

  GgufWriter out;
  out.add_string("general.architecture", arch.name);
  out.add_string("general.name", "lat");
  out.add_uint32("general.alignment", static_cast<uint32_t>(kGgufAlignment));
  // llama_ftype: all f32, mostly f16, mostly q8_0, mostly bf16.
  const std::map<GgmlType, uint32_t> file_types = {
      {GgmlType::f32, 0}, {GgmlType::f16, 1}, {GgmlType::q8_0, 7}, {GgmlType::bf16, 32}};
  out.add_uint32("general.file_type", file_types.at(dtype));
  arch.add_metadata(out, m);
  add_gguf_vocabulary(out, vocab);
  arch.add_tensors(out, w, vocab_size, static_cast<int64_t>(vocab.tokens.size()), dtype);
  out.write(path, "export");
}

void add_gguf_model_shape(GgufWriter& out, const std::string& arch, const ModelConfig& m) {
  const std::string a = arch + ".";
  out.add_uint32(a + "context_length", kGgufContextLength);
  out.add_uint32(a + "embedding_length", static_cast<uint32_t>(m.d_model));
  out.add_uint32(a + "block_count", static_cast<uint32_t>(m.n_layers));
  out.add_uint32(a + "feed_forward_length",
                 static_cast<uint32_t>(swiglu_hidden_size(m.d_model, m.mlp_ratio, m.intermediate_size)));
  out.add_uint32(a + "attention.head_count", static_cast<uint32_t>(m.attn.n_heads));
}

void add_gguf_tensor(GgufWriter& out, const std::string& name, const std::vector<int64_t>& shape,
                     const std::vector<float>& data, GgmlType dtype, GgufStorage storage) {
  GgmlType type = storage == GgufStorage::f32 ? GgmlType::f32 : dtype;
  if (type == GgmlType::q8_0 && shape.back() % kQ8BlockSize != 0) type = GgmlType::f16;
  out.add_tensor(name, shape, data, type);
}

std::vector<float> with_token_rows(std::vector<float> data, int64_t cols, int64_t n_tokens) {
  data.resize(static_cast<size_t>(n_tokens * cols), 0.0f);
  return data;
}

std::vector<float> gguf_norm_scale(const Tensor& w, const ModelConfig& model) {
  std::vector<float> scale = w.to_vector<float>();
  if (model.norm_zero_centered)
    for (float& x : scale) x += 1.0f;
  return scale;
}

const Tensor& lat_tensor(const ModelWeights& w, const std::string& name) {
  for (const auto& [n, t] : w.checkpoint.model)
    if (n == name) return t;
  throw Error("export --format gguf: '" + w.path + "' has no tensor '" + name + "'");
}

void GgufTensorCopier::weight(const std::string& gguf_name, const std::string& lat_name) const {
  const Tensor& t = lat_tensor(w_, lat_name);
  add_gguf_tensor(out_, gguf_name, t.shape(), t.to_vector<float>(), dtype_, GgufStorage::weight);
}

void GgufTensorCopier::f32(const std::string& gguf_name, const std::string& lat_name) const {
  const Tensor& t = lat_tensor(w_, lat_name);
  add_gguf_tensor(out_, gguf_name, t.shape(), t.to_vector<float>(), dtype_, GgufStorage::f32);
}

void GgufTensorCopier::norm(const std::string& gguf_name, const std::string& lat_name) const {
  const Tensor& t = lat_tensor(w_, lat_name);
  add_gguf_tensor(out_, gguf_name, t.shape(), gguf_norm_scale(t, w_.config.model), dtype_, GgufStorage::f32);
}

void GgufTensorCopier::token_rows(const std::string& gguf_name, const std::string& lat_name) const {
  const Tensor& t = lat_tensor(w_, lat_name);
  const int64_t D = t.size(1);
  add_gguf_tensor(out_, gguf_name, {n_tokens_, D}, with_token_rows(t.to_vector<float>(), D, n_tokens_), dtype_,
                  GgufStorage::weight);
}

}  // namespace lat
