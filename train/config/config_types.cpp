// Queries on a resolved config (config_types.h).
#include "train/config/config_types.h"

#include <sstream>

namespace lat {

std::vector<std::string> mixer_pattern(const std::string& layers) {
  std::vector<std::string> names;
  std::stringstream ss(layers);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    names.push_back(first == std::string::npos ? "" : item.substr(first, item.find_last_not_of(" \t") + 1 - first));
  }
  return names;
}

std::vector<std::string> layer_mixers(const ModelConfig& model) {
  const std::vector<std::string> pattern = mixer_pattern(model.layers);
  LAT_CHECK(!pattern.empty(), "layer_mixers: model.layers: expected mixer names, got '" << model.layers << "'");
  std::vector<std::string> mixers;
  for (int64_t i = 0; i < model.n_layers; ++i) mixers.push_back(pattern[i % pattern.size()]);
  return mixers;
}

int64_t value_head_dim(const ModelConfig& model) {
  return static_cast<int64_t>(static_cast<double>(model.head_dim) * model.expand_v);
}

}  // namespace lat
