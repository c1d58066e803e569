// lat <-> transformers tensor names and layouts (hf_weights.h).
#include "train/files/hf_weights.h"

#include <cstring>
#include <map>

#include "lat/error.h"
#include "layers/swiglu.h"

namespace lat {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

/// A spec whose transformers tensor is one lat tensor of the same shape.
HfTensorSpec renamed(const std::string& hf_name, const std::string& lat_name, std::vector<int64_t> shape,
                     HfValues values = HfValues::same) {
  return {hf_name, shape, {{lat_name, shape}}, values};
}

/// A spec whose transformers tensor stacks `parts` along dim 0.
HfTensorSpec stacked(const std::string& hf_name, std::vector<HfTensorPart> parts) {
  std::vector<int64_t> shape = parts.front().shape;
  shape[0] = 0;
  for (const HfTensorPart& p : parts) shape[0] += p.shape[0];
  return {hf_name, shape, std::move(parts), HfValues::same};
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

std::map<std::string, std::string> hf_tensor_labels(const ModelConfig& m, int64_t vocab_size) {
  std::map<std::string, std::string> labels;
  for (const HfTensorSpec& spec : hf_tensor_layout(m, vocab_size)) {
    if (spec.parts.size() == 1) {
      labels[spec.parts.front().lat_name] = "'" + spec.hf_name + "'";
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
  const int64_t d = m.d_model;
  const int64_t hidden = swiglu_hidden_size(d, m.mlp_ratio, m.intermediate_size);
  const int64_t key_dim = m.n_heads * m.head_dim;                     // H*K
  const int64_t value_dim = m.linear.n_v_heads * value_head_dim(m);  // Hv*V
  const int64_t Hv = m.linear.n_v_heads, conv = m.linear.conv_size;
  const int64_t Ha = m.attn.n_heads, Da = m.attn.head_dim, Hkv = m.attn.n_kv_heads;
  const int64_t q_rows = Ha * Da * (m.attn.output_gate ? 2 : 1);
  const HfValues norm = HfValues::zero_centred_norm;

  std::vector<HfTensorSpec> specs;
  specs.push_back(renamed("model.embed_tokens.weight", "embeddings.weight", {vocab_size, d}));
  const std::vector<std::string> kinds = layer_mixers(m);
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    const std::string lat = "layers." + std::to_string(i) + ".";
    specs.push_back(renamed(hf + "input_layernorm.weight", lat + "attn_norm.weight", {d}, norm));
    if (kinds[i] == "gdn") {
      const std::string h = hf + "linear_attn.", a = lat + "attn.";
      specs.push_back(stacked(h + "in_proj_qkv.weight", {{a + "q_proj.weight", {key_dim, d}},
                                                         {a + "k_proj.weight", {key_dim, d}},
                                                         {a + "v_proj.weight", {value_dim, d}}}));
      specs.push_back(stacked(h + "conv1d.weight", {{a + "q_conv1d.weight", {key_dim, 1, conv}},
                                                    {a + "k_conv1d.weight", {key_dim, 1, conv}},
                                                    {a + "v_conv1d.weight", {value_dim, 1, conv}}}));
      specs.push_back(renamed(h + "in_proj_z.weight", a + "g_proj.weight", {value_dim, d}));
      specs.push_back(renamed(h + "in_proj_a.weight", a + "a_proj.weight", {Hv, d}));
      specs.push_back(renamed(h + "in_proj_b.weight", a + "b_proj.weight", {Hv, d}));
      specs.push_back(renamed(h + "A_log", a + "A_log", {Hv}));
      specs.push_back(renamed(h + "dt_bias", a + "dt_bias", {Hv}));
      specs.push_back(renamed(h + "norm.weight", a + "o_norm.weight", {value_head_dim(m)}));
      specs.push_back(renamed(h + "out_proj.weight", a + "o_proj.weight", {d, value_dim}));
    } else {
      const std::string h = hf + "self_attn.", a = lat + "attn.";
      specs.push_back(renamed(h + "q_proj.weight", a + "q_proj.weight", {q_rows, d}));
      specs.push_back(renamed(h + "k_proj.weight", a + "k_proj.weight", {Hkv * Da, d}));
      specs.push_back(renamed(h + "v_proj.weight", a + "v_proj.weight", {Hkv * Da, d}));
      specs.push_back(renamed(h + "o_proj.weight", a + "o_proj.weight", {d, Ha * Da}));
      specs.push_back(renamed(h + "q_norm.weight", a + "q_norm.weight", {Da}, norm));
      specs.push_back(renamed(h + "k_norm.weight", a + "k_norm.weight", {Da}, norm));
    }
    specs.push_back(renamed(hf + "post_attention_layernorm.weight", lat + "mlp_norm.weight", {d}, norm));
    specs.push_back(renamed(hf + "mlp.gate_proj.weight", lat + "mlp.gate_proj.weight", {hidden, d}));
    specs.push_back(renamed(hf + "mlp.up_proj.weight", lat + "mlp.up_proj.weight", {hidden, d}));
    specs.push_back(renamed(hf + "mlp.down_proj.weight", lat + "mlp.down_proj.weight", {d, hidden}));
  }
  specs.push_back(renamed("model.norm.weight", "norm.weight", {d}, norm));
  if (!m.tie_embeddings) specs.push_back(renamed("lm_head.weight", "lm_head.weight", {vocab_size, d}));
  return specs;
}

NamedTensors hf_tensors_from_lat(const ModelConfig& m, int64_t vocab_size, const NamedTensors& tensors,
                                 const std::string& source) {
  const std::map<std::string, const Tensor*> lat = by_name(tensors);
  const bool shift = !m.norm_zero_centered;
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
    // lat scales by w, transformers by 1 + w.
    if (spec.values == HfValues::zero_centred_norm && shift)
      for (float& w : data) w -= 1.0f;
    out.emplace_back(spec.hf_name, Tensor::from_vector(data, spec.shape));
  }
  return out;
}

NamedTensors lat_tensors_from_hf(const ModelConfig& m, int64_t vocab_size, const NamedTensors& tensors,
                                 const std::string& source) {
  std::map<std::string, const Tensor*> hf = by_name(tensors);
  LAT_CHECK(m.norm_zero_centered, "lat_tensors_from_hf: expected a model with model.norm_zero_centered");
  NamedTensors out;
  for (const HfTensorSpec& spec : hf_tensor_layout(m, vocab_size)) {
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
      out.emplace_back(spec.parts.front().lat_name, t);
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
