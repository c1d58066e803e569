// Weight-decay grouping by parameter name and shape.
#include "optim/weight_decay.h"

#include <sstream>

namespace lat {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The last dotted component: "layers.0.attn.A_log" -> "A_log".
std::string last_component(const std::string& name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

}  // namespace

bool applies_weight_decay(const std::string& name, const Tensor& t) {
  if (t.dim() != 2 || last_component(name) != "weight") return false;
  if (name.find("norm") != std::string::npos) return false;
  if (name.find("conv") != std::string::npos) return false;
  if (name == "embeddings.weight" || ends_with(name, ".embeddings.weight")) return false;
  return true;
}

std::string describe_weight_decay_groups(const std::vector<NamedParameter>& params,
                                         const std::vector<bool>& decay, double weight_decay) {
  LAT_CHECK(decay.size() == params.size(), "describe_weight_decay_groups: decay has " << decay.size()
                                                                                       << " flags for "
                                                                                       << params.size() << " parameters");
  std::ostringstream os;
  for (bool group : {true, false}) {
    int64_t tensors = 0, numel = 0;
    std::string names;
    for (size_t i = 0; i < params.size(); ++i) {
      if (decay[i] != group) continue;
      ++tensors;
      numel += params[i].tensor.numel();
      names += (names.empty() ? "" : ", ") + params[i].name;
    }
    if (group) {
      os << "decay (weight_decay " << weight_decay << "): ";
    } else {
      os << "\nno decay: ";
    }
    os << tensors << " tensors, " << numel << " parameters" << (names.empty() ? "" : ": ") << names;
  }
  return os.str();
}

}  // namespace lat
