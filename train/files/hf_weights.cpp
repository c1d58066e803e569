// lat <-> transformers tensor names and layouts (hf_weights.h).
#include "train/files/hf_weights.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "lat/error.h"
#include "train/files/hf_config.h"
#include "train/files/hf_granite.h"
#include "train/files/hf_kimi.h"
#include "train/files/hf_qwen35.h"

namespace lat {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

bool is_skipped_hf_tensor(const std::string& name) {
  return name.rfind("mtp.", 0) == 0 || name.rfind("model.visual.", 0) == 0;
}

std::map<std::string, const Tensor*> by_name(const NamedTensors& tensors) {
  std::map<std::string, const Tensor*> map;
  for (const auto& [name, t] : tensors) map[name] = &t;
  return map;
}

/// A tied model's lm_head is its embeddings: an exact copy beside them is dropped; any other
/// lm_head.weight would be trained weights silently discarded, so it is an error.
void check_tied_lm_head(const Tensor& lm_head, const Tensor& embeddings, const std::string& source) {
  const bool copy = lm_head.shape() == embeddings.shape() &&
                    std::memcmp(lm_head.data<float>(), embeddings.data<float>(),
                                static_cast<size_t>(lm_head.numel()) * sizeof(float)) == 0;
  if (!copy)
    throw Error("load_model_weights: '" + source + "': tensor 'lm_head.weight' " + shape_str(lm_head.shape()) +
                " is not a copy of 'model.embed_tokens.weight' " + shape_str(embeddings.shape()) +
                ", but config.json sets tie_word_embeddings: true (a tied model's lm_head is its embeddings)");
}

}  // namespace

HfTensorSpec hf_renamed(const std::string& hf_name, const std::string& lat_name, std::vector<int64_t> shape,
                        HfValues values) {
  return {hf_name, shape, {{lat_name, shape}}, values};
}

HfTensorSpec hf_stacked(const std::string& hf_name, std::vector<HfTensorPart> parts) {
  std::vector<int64_t> shape = parts.front().shape;
  shape[0] = 0;
  for (const HfTensorPart& p : parts) shape[0] += p.shape[0];
  return {hf_name, shape, std::move(parts), HfValues::same};
}

std::vector<HfTensorSpec> hf_attention_projections(const std::string& hf, const std::string& lat,
                                                   const ModelConfig& m, int64_t q_rows) {
  const int64_t d = m.d_model, kv_rows = m.attn.n_kv_heads * m.attn.head_dim;
  const std::string h = hf + "self_attn.", a = lat + "attn.";
  return {hf_renamed(h + "q_proj.weight", a + "q_proj.weight", {q_rows, d}),
          hf_renamed(h + "k_proj.weight", a + "k_proj.weight", {kv_rows, d}),
          hf_renamed(h + "v_proj.weight", a + "v_proj.weight", {kv_rows, d}),
          hf_renamed(h + "o_proj.weight", a + "o_proj.weight", {d, m.attn.n_heads * m.attn.head_dim})};
}

std::map<std::string, std::string> hf_tensor_labels(const ModelConfig& m, int64_t vocab_size) {
  std::map<std::string, std::string> labels;
  for (const HfTensorSpec& spec : hf_tensor_layout(m, vocab_size)) {
    if (spec.parts.size() == 1) {
      // The first tensor that holds it names it (kimi's tied lm_head is the embeddings again).
      labels.emplace(spec.parts.front().lat_name, "'" + spec.hf_name + "'");
      continue;
    }
    int64_t row = 0;
    for (const HfTensorPart& part : spec.parts) {
      labels[part.lat_name] = "'" + spec.hf_name + "' rows [" + std::to_string(row) + ", " +
                              std::to_string(row + part.shape[0]) + ")";
      row += part.shape[0];
    }
  }
  return labels;
}

std::vector<HfTensorSpec> hf_tensor_layout(const ModelConfig& m, int64_t vocab_size) {
  if (hf_family_of(m) == HfFamily::kimi) return kimi_tensor_layout(m, vocab_size);
  return hf_family_of(m) == HfFamily::granite ? granite_tensor_layout(m, vocab_size)
                                              : qwen35_tensor_layout(m, vocab_size);
}

NamedTensors hf_tensors_from_lat(const ModelConfig& m, int64_t vocab_size, const NamedTensors& tensors,
                                 const std::string& source) {
  const std::map<std::string, const Tensor*> lat = by_name(tensors);
  const bool zero_centred = m.norm_zero_centered;
  NamedTensors out;
  for (const HfTensorSpec& spec : hf_tensor_layout(m, vocab_size)) {
    std::vector<float> data;
    data.reserve(static_cast<size_t>(numel_of(spec.shape)));
    for (const HfTensorPart& part : spec.parts) {
      auto it = lat.find(part.lat_name);
      LAT_CHECK(it != lat.end(), "export --format hf: '" << source << "' has no tensor '" << part.lat_name << "'");
      LAT_CHECK(it->second->shape() == part.shape, "export --format hf: '" << source << "': tensor '" << part.lat_name
                                                                           << "': expected shape "
                                                                           << shape_str(part.shape) << ", got "
                                                                           << shape_str(it->second->shape()));
      const std::vector<float> values = it->second->to_vector<float>();
      data.insert(data.end(), values.begin(), values.end());
    }
    // lat scales by 1 + w where model.norm_zero_centered, else by w.
    if (spec.values == HfValues::zero_centred_norm && !zero_centred)
      for (float& w : data) w -= 1.0f;
    if (spec.values == HfValues::plain_norm && zero_centred)
      for (float& w : data) w += 1.0f;
    out.emplace_back(spec.hf_name, Tensor::from_vector(data, spec.shape));
  }
  return out;
}

NamedTensors lat_tensors_from_hf(const ModelConfig& m, int64_t vocab_size, const NamedTensors& file_tensors,
                                 const std::string& source) {
  // transformers' in-memory names of a kimi_linear model, saved as they are, read as
  // save_pretrained's.
  const NamedTensors tensors = hf_family_of(m) == HfFamily::kimi ? kimi_saved_names(file_tensors) : file_tensors;
  std::map<std::string, const Tensor*> hf = by_name(tensors);
  NamedTensors out;
  for (const HfTensorSpec& spec : hf_tensor_layout(m, vocab_size)) {
    // The import reads the family's norm convention into model.norm_zero_centered.
    LAT_CHECK(spec.values != (m.norm_zero_centered ? HfValues::plain_norm : HfValues::zero_centred_norm),
              "lat_tensors_from_hf: '" << spec.hf_name << "' is in the other norm convention than the model's");
    auto it = hf.find(spec.hf_name);
    LAT_CHECK(it != hf.end(), "load_model_weights: '" << source << "' has no tensor '" << spec.hf_name
                                                      << "' (expected " << shape_str(spec.shape)
                                                      << " from config.json)");
    const Tensor& t = *it->second;
    LAT_CHECK(t.shape() == spec.shape, "load_model_weights: '" << source << "': tensor '" << spec.hf_name
                                                               << "': expected shape " << shape_str(spec.shape)
                                                               << " (from config.json), got " << shape_str(t.shape()));
    hf.erase(it);
    if (spec.parts.size() == 1) {
      const HfTensorPart& part = spec.parts.front();
      // A lat tensor the file holds twice (kimi's tied lm_head) must be a copy.
      const bool read_before = std::any_of(out.begin(), out.end(),
                                           [&](const auto& o) { return o.first == part.lat_name; });
      if (read_before) {
        check_tied_lm_head(t, *by_name(tensors).at("model.embed_tokens.weight"), source);
        continue;
      }
      // A tensor stored in another shape of the same values (kimi's A_log [1, 1, H, 1]).
      out.emplace_back(part.lat_name,
                       part.shape == spec.shape ? t : Tensor::from_vector(t.to_vector<float>(), part.shape));
      continue;
    }
    const std::vector<float> values = t.to_vector<float>();
    size_t begin = 0;
    for (const HfTensorPart& part : spec.parts) {
      const size_t n = static_cast<size_t>(numel_of(part.shape));
      out.emplace_back(part.lat_name,
                       Tensor::from_vector(std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(begin),
                                                              values.begin() + static_cast<std::ptrdiff_t>(begin + n)),
                                           part.shape));
      begin += n;
    }
  }
  for (const auto& [name, t] : hf) {
    if (is_skipped_hf_tensor(name)) continue;
    if (name == "lm_head.weight" && m.tie_embeddings) {
      check_tied_lm_head(*t, *by_name(tensors).at("model.embed_tokens.weight"), source);
      continue;
    }
    throw Error("load_model_weights: '" + source + "': tensor '" + name + "' " + shape_str(t->shape()) +
                " is not part of the model config.json describes");
  }
  return out;
}

}  // namespace lat
