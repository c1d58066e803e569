// Model files to a HybridLM (trained_model.h).
#include "train/files/trained_model.h"

#include <map>

#include "train/config/model_config.h"
#include "train/files/tokenizer_files.h"

namespace lat {

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

std::optional<int64_t> vocab_size_of(const ModelWeights& w) {
  for (const auto& [name, tensor] : w.checkpoint.model)
    if (name == "embeddings.weight" && tensor.dim() == 2) return tensor.size(0);
  return std::nullopt;
}

std::unique_ptr<HybridLM> model_from_weights(const ModelWeights& w, const Config& config) {
  const std::optional<int64_t> vocab_size = vocab_size_of(w);
  LAT_CHECK(vocab_size.has_value(), "model_from_weights: '" << w.path << "' has no 2-D tensor 'embeddings.weight'");
  Generator gen(0);  // the initialization is overwritten: load_weights sets every parameter
  auto model = std::make_unique<HybridLM>(hybrid_lm_config(config.model, *vocab_size), gen);
  load_weights(*model, w.checkpoint.model, w.path);
  return model;
}

TrainedModel load_trained_model(const std::string& checkpoint) {
  const ModelWeights weights = load_model_weights(checkpoint);
  TrainedModel t;
  t.path = weights.path;
  t.config = parse_config(weights.checkpoint.config_yaml, t.path);
  t.step = weights.checkpoint.step;
  t.tokenizer = checkpoint_tokenizer(weights.checkpoint);
  t.model = model_from_weights(weights, t.config);
  return t;
}

}  // namespace lat
