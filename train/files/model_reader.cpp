// Model construction from config, weight loading and device placement.
#include "train/files/model_reader.h"

#include <map>

#include "train/files/checkpoint.h"
#include "train/files/export.h"

namespace lat {

HybridLMConfig hybrid_lm_config(const ModelConfig& model, int64_t vocab_size) {
  HybridLMConfig c;
  c.vocab_size = model.vocab_size > 0 ? model.vocab_size : vocab_size;
  c.layers = layer_mixers(model);
  c.mlp_ratio = model.mlp_ratio;
  c.norm_eps = model.norm_eps;
  c.tie_embeddings = model.tie_embeddings;
  MixerConfig& m = c.mixer;
  m.d_model = model.d_model;
  m.n_heads = model.n_heads;
  m.head_dim = model.head_dim;
  m.expand_v = model.expand_v;
  m.n_kv_heads = model.attn.n_kv_heads;
  m.window_size = model.attn.window_size;
  m.rope_theta = model.attn.rope_theta;
  m.feature_map = model.linear.feature_map;
  m.normalize = model.linear.normalize;
  m.use_short_conv = model.linear.use_short_conv;
  m.conv_size = model.linear.conv_size;
  m.use_gate = model.linear.use_gate;
  m.chunk_size = model.linear.chunk_size;
  return c;
}

void load_weights(const Module& model, const std::vector<std::pair<std::string, Tensor>>& weights,
                  const std::string& source) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, tensor] : weights) by_name[name] = &tensor;
  for (auto& [name, param] : model.named_parameters()) {
    auto it = by_name.find(name);
    LAT_CHECK(it != by_name.end(), "load_weights: '" << source << "' has no tensor '" << name << "'");
    const Tensor& w = *it->second;
    LAT_CHECK(w.shape() == param.shape(), "load_weights: '" << source << "': '" << name << "': expected shape "
                                                            << shape_str(param.shape()) << ", got "
                                                            << shape_str(w.shape()));
    param.copy_(w.device() == param.device() ? w : w.to(param.device()));
    by_name.erase(it);
  }
  LAT_CHECK(by_name.empty(), "load_weights: '" << source << "': tensor '" << by_name.begin()->first
                                               << "' is not a parameter of this model");
}

void move_parameters(const Module& model, Device device) {
  for (auto& [name, param] : model.named_parameters()) {
    if (param.device() == device) continue;
    // Swap the storage under the existing handle: modules and optimizers hold this very
    // TensorImpl, so a new tensor would leave them pointing at the old copy.
    param.impl()->storage = param.to(device).impl()->storage;
  }
}

Device parse_device(const std::string& device) {
  Device d = Device::cpu();
  if (device == "cpu") return d;
  if (device == "cuda") {
    d = Device::cuda(0);
  } else if (device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
             device.find_first_not_of("0123456789", 5) == std::string::npos) {
    d = Device::cuda(std::stoi(device.substr(5)));
  } else {
    throw ConfigError("train.device: expected cpu, cuda or cuda:N, got '" + device + "'");
  }
  if (!cuda_built())
    throw ConfigError("train.device: '" + device +
                      "': this lat was built without CUDA (configure with -DLAT_CUDA=ON where nvcc is installed)");
  const int visible = cuda_device_count();
  if (d.index >= visible)
    throw ConfigError("train.device: '" + device + "': " + std::to_string(visible) +
                      " CUDA device(s) are visible to this process" +
                      (visible == 0 ? " (no GPU or driver here; use train.device: cpu)" : ""));
  return d;
}

TrainedModel load_trained_model(const std::string& checkpoint) {
  TrainedModel t;
  ModelWeights weights = load_model_weights(checkpoint);
  t.path = weights.path;
  Checkpoint& ckpt = weights.checkpoint;
  t.config = parse_config(ckpt.config_yaml, t.path);
  t.step = ckpt.step;
  if (ckpt.tokenizer_type == "char")
    t.tokenizer = Tokenizer::char_from_vocab(ckpt.tokenizer_vocab);
  else if (ckpt.tokenizer_type == "byte")
    t.tokenizer = Tokenizer::byte();
  int64_t vocab_size = 0;
  for (const auto& [name, tensor] : ckpt.model)
    if (name == "embeddings.weight" && tensor.dim() == 2) vocab_size = tensor.size(0);
  LAT_CHECK(vocab_size > 0, "load_trained_model: '" << t.path << "' has no 2-D tensor 'embeddings.weight'");
  Generator gen(static_cast<uint64_t>(t.config.train.seed));
  t.model = std::make_unique<HybridLM>(hybrid_lm_config(t.config.model, vocab_size), gen);
  load_weights(*t.model, ckpt.model, t.path);
  return t;
}

}  // namespace lat
