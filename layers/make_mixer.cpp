// make_mixer: model.layers kind -> mixer, the one place that maps kind names to classes
// (mixer_kinds() lists the names of the same table).
#include <algorithm>

#include "layers/attention.h"
#include "layers/kda_layer.h"
#include "layers/linear_attention_layers.h"
#include "layers/mamba2_layer.h"
#include "layers/mla_attention.h"

namespace lat {
namespace {

struct MixerKind {
  std::string name;
  std::unique_ptr<Mixer> (*make)(const MixerConfig&, Generator&);
};

constexpr bool kRetentionDecay = true;  // SimpleGLA with RetNet's fixed decay

const std::vector<MixerKind>& kinds() {
  static const std::vector<MixerKind> table = {
      {"attn", [](const MixerConfig& c, Generator& g) -> std::unique_ptr<Mixer> {
         return std::make_unique<Attention>(c, g);
       }},
      {"linear_attn", [](const MixerConfig& c, Generator& g) -> std::unique_ptr<Mixer> {
         return std::make_unique<LinearAttention>(c, g);
       }},
      {"simple_gla", [](const MixerConfig& c, Generator& g) -> std::unique_ptr<Mixer> {
         return std::make_unique<SimpleGLA>(c, g);
       }},
      {"retention", [](const MixerConfig& c, Generator& g) -> std::unique_ptr<Mixer> {
         return std::make_unique<SimpleGLA>(c, g, kRetentionDecay);
       }},
      {"delta_net", [](const MixerConfig& c, Generator& g) -> std::unique_ptr<Mixer> {
         return std::make_unique<DeltaNet>(c, g);
       }},
      {"gdn", [](const MixerConfig& c, Generator& g) -> std::unique_ptr<Mixer> {
         return std::make_unique<GatedDeltaNet>(c, g);
       }},
      {"mamba2", [](const MixerConfig& c, Generator& g) -> std::unique_ptr<Mixer> {
         return std::make_unique<Mamba2>(c, g);
       }},
      {"kda", [](const MixerConfig& c, Generator& g) -> std::unique_ptr<Mixer> {
         return std::make_unique<KimiDeltaAttention>(c, g);
       }},
      {"mla", [](const MixerConfig& c, Generator& g) -> std::unique_ptr<Mixer> {
         return std::make_unique<MlaAttention>(c, g);
       }},
  };
  return table;
}

}  // namespace

const std::vector<std::string>& mixer_kinds() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const MixerKind& kind : kinds()) out.push_back(kind.name);
    return out;
  }();
  return names;
}

std::unique_ptr<Mixer> make_mixer(const std::string& kind, const MixerConfig& config, Generator& gen) {
  const auto it = std::find_if(kinds().begin(), kinds().end(), [&](const MixerKind& k) { return k.name == kind; });
  if (it == kinds().end()) {
    std::string expected;
    for (const std::string& name : mixer_kinds()) expected += (expected.empty() ? "" : ", ") + name;
    LAT_CHECK(false, "make_mixer: kind: expected one of " << expected << ", got '" << kind << "'");
  }
  return it->make(config, gen);
}

}  // namespace lat
