// Model files to a HybridLM (trained_model.h).
#include "train/files/trained_model.h"

#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "layers/swiglu.h"
#include "train/config/model_config.h"
#include "train/files/config_json.h"
#include "train/files/tokenizer_files.h"

namespace lat {
namespace {

/// The layer index i of a tensor named "layers.{i}.<...>"; nullopt for other names (and for
/// an index that is not a decimal int64: load_weights reports such a tensor as unexpected).
std::optional<int64_t> layer_index(const std::string& name) {
  const std::string prefix = "layers.";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return std::nullopt;
  int64_t index = 0;
  const char* begin = name.data() + prefix.size();
  const char* end = name.data() + dot;
  const auto [ptr, ec] = std::from_chars(begin, end, index);
  if (ec != std::errc() || ptr != end || begin == end) return std::nullopt;
  return index;
}

/// The sizes of w.config that set how much HybridLM allocates, each compared with the dimension
/// of the tensor in `w` that holds it (model_from_weights lists them). Every other shape is
/// load_weights' to compare, once the model is known to be no larger than the file.
class SizeChecks {
 public:
  explicit SizeChecks(const ModelWeights& w) : w_(w) {
    for (const auto& [name, tensor] : w.checkpoint.model) by_name_[name] = &tensor;
  }

  void run() const {
    const ModelConfig& m = w_.config.model;
    if (m.vocab_size > 0)
      expect("model.vocab_size " + std::to_string(m.vocab_size), "embeddings.weight", 0, m.vocab_size, "rows");
    expect("model.d_model " + std::to_string(m.d_model), "embeddings.weight", 1, m.d_model, "columns");
    check_layer_count(m);
    const std::vector<std::string> kinds = layer_mixers(m);
    const int64_t hidden = swiglu_hidden_size(m.d_model, m.mlp_ratio, m.intermediate_size);
    for (size_t i = 0; i < kinds.size(); ++i) {
      const std::string layer = "layers." + std::to_string(i) + ".";
      if (kinds[i] == "attn")
        check_attention_sizes(m, layer);
      else if (kinds[i] == "mamba2")
        check_mamba2_sizes(m, layer);
      else if (kinds[i] == "mla")
        check_mla_sizes(m, layer);
      else
        check_linear_sizes(m, layer, kinds[i]);
      expect(mlp_text(m), layer + "mlp.gate_proj.weight", 0, hidden, "rows (the SwiGLU hidden width)");
      // Mixers without short convolutions hold no conv weight, and an absent one (with
      // use_short_conv) costs conv_size <= 64 taps per channel: load_weights names it.
      if (by_name_.count(layer + "attn.q_conv1d.weight") != 0)
        expect("model.linear.conv_size " + std::to_string(m.linear.conv_size), layer + "attn.q_conv1d.weight", 2,
               m.linear.conv_size, "taps");
    }
  }

 private:
  /// q_proj rows and o_proj columns of a softmax-attention layer: its own heads and head size
  /// (model.attn.n_heads, head_dim; the model's when 0), q_proj twice as tall with output_gate.
  void check_attention_sizes(const ModelConfig& m, const std::string& layer) const {
    const int64_t heads = m.attn.n_heads > 0 ? m.attn.n_heads : m.n_heads;
    const int64_t head_dim = m.attn.head_dim > 0 ? m.attn.head_dim : m.head_dim;
    const std::string sizes = "model.attn.n_heads " + std::to_string(heads) + " x model.attn.head_dim " +
                              std::to_string(head_dim);
    const bool gated = m.attn.output_gate;
    expect(sizes + (gated ? " x 2 (query and output gate, model.attn.output_gate)" : ""), layer + "attn.q_proj.weight",
           0, heads * head_dim * (gated ? 2 : 1), "rows");
    expect(sizes + " (attn layer)", layer + "attn.o_proj.weight", 1, heads * head_dim, "columns");
  }

  /// in_proj rows, out_proj columns and conv1d taps of a mamba2 layer: d_inner = expand *
  /// d_model in heads of model.mamba.head_dim, B and C of d_state in n_groups groups.
  void check_mamba2_sizes(const ModelConfig& m, const std::string& layer) const {
    const MambaConfig& o = m.mamba;
    const int64_t d_inner = o.expand * m.d_model, heads = d_inner / o.head_dim;
    const std::string inner = "model.mamba.expand " + std::to_string(o.expand) + " x model.d_model " +
                              std::to_string(m.d_model);
    expect(inner + ", model.mamba.d_state " + std::to_string(o.d_state) + ", n_groups " + std::to_string(o.n_groups) +
               ", head_dim " + std::to_string(o.head_dim) + " (mamba2 layer: 2 d_inner + 2 n_groups d_state + heads)",
           layer + "attn.in_proj.weight", 0, 2 * d_inner + 2 * o.n_groups * o.d_state + heads, "rows");
    expect(inner + " (mamba2 layer: d_inner)", layer + "attn.out_proj.weight", 1, d_inner, "columns");
    expect("model.mamba.conv_size " + std::to_string(o.conv_size), layer + "attn.conv1d.weight", 2, o.conv_size, "taps");
  }

  /// The latent projections and o_proj columns of an mla layer: model.attn.n_heads heads,
  /// the latent and head sizes of model.mla.
  void check_mla_sizes(const ModelConfig& m, const std::string& layer) const {
    const MlaConfig& o = m.mla;
    const int64_t heads = m.attn.n_heads > 0 ? m.attn.n_heads : m.n_heads;
    const std::string rank = "model.mla.kv_lora_rank " + std::to_string(o.kv_lora_rank);
    expect(rank + " + qk_rope_head_dim " + std::to_string(o.qk_rope_head_dim) + " (mla layer)",
           layer + "attn.kv_a_proj_with_mqa.weight", 0, o.kv_lora_rank + o.qk_rope_head_dim, "rows");
    expect(rank + " (mla layer)", layer + "attn.kv_b_proj.weight", 1, o.kv_lora_rank, "columns");
    expect("model.attn.n_heads " + std::to_string(heads) + " x (model.mla.qk_nope_head_dim " +
               std::to_string(o.qk_nope_head_dim) + " + v_head_dim " + std::to_string(o.v_head_dim) + ") (mla layer)",
           layer + "attn.kv_b_proj.weight", 0, heads * (o.qk_nope_head_dim + o.v_head_dim), "rows");
    expect("model.attn.n_heads " + std::to_string(heads) + " x model.mla.v_head_dim " + std::to_string(o.v_head_dim) +
               " (mla layer)",
           layer + "attn.o_proj.weight", 1, heads * o.v_head_dim, "columns");
  }

  /// q_proj rows and o_proj columns of a linear-attention layer: n_heads key heads of head_dim;
  /// gdn and delta_net have model.linear.n_v_heads value heads (0 before validation = n_heads).
  void check_linear_sizes(const ModelConfig& m, const std::string& layer, const std::string& kind) const {
    const std::string heads = "model.n_heads " + std::to_string(m.n_heads) + " x ";
    expect(heads + "model.head_dim " + std::to_string(m.head_dim), layer + "attn.q_proj.weight", 0,
           m.n_heads * m.head_dim, "rows");
    const bool grouped =
        (kind == "gdn" || kind == "delta_net") && m.linear.n_v_heads > 0 && m.linear.n_v_heads != m.n_heads;
    const std::string value_heads =
        grouped ? "model.linear.n_v_heads " + std::to_string(m.linear.n_v_heads) + " x " : heads;
    expect(value_heads + "value head dim " + std::to_string(value_head_dim(m)) + " (model.head_dim x model.expand_v, " +
               kind + " layer)",
           layer + "attn.o_proj.weight", 1, (grouped ? m.linear.n_v_heads : m.n_heads) * value_head_dim(m), "columns");
  }

  std::string prefix() const { return "model_from_weights: '" + w_.path + "'"; }

  const Tensor& tensor(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) throw Error(prefix() + " has no tensor " + tensor_label(w_, name));
    return *it->second;
  }

  /// Dimension `dim` of tensor `name` is `expected` (what `keys` ask for).
  void expect(const std::string& keys, const std::string& name, int64_t dim, int64_t expected,
              const std::string& unit) const {
    const Tensor& t = tensor(name);
    if (dim < t.dim() && t.size(dim) == expected) return;
    const std::string found = dim < t.dim() ? std::to_string(t.size(dim)) : "no such dimension";
    throw Error(prefix() + ": " + keys + " does not match tensor " + tensor_label(w_, name) + " " +
                shape_str(t.shape()) + ": expected " + std::to_string(expected) + " " + unit + ", found " + found);
  }

  void check_layer_count(const ModelConfig& m) const {
    std::set<int64_t> layers;
    for (const auto& [name, tensor] : by_name_)
      if (std::optional<int64_t> i = layer_index(name)) layers.insert(*i);
    if (static_cast<int64_t>(layers.size()) == m.n_layers) return;
    const std::string range = layers.empty() ? ""
                                             : " (layers." + std::to_string(*layers.begin()) + " .. layers." +
                                                   std::to_string(*layers.rbegin()) + ")";
    throw Error(prefix() + ": model.n_layers " + std::to_string(m.n_layers) + " does not match the tensors: expected " +
                std::to_string(m.n_layers) + " layers, found " + std::to_string(layers.size()) + range);
  }

  static std::string mlp_text(const ModelConfig& m) {
    if (m.intermediate_size > 0) return "model.intermediate_size " + std::to_string(m.intermediate_size);
    std::ostringstream os;
    os << "model.mlp_ratio " << m.mlp_ratio << " (with model.d_model " << m.d_model << ")";
    return os.str();
  }

  const ModelWeights& w_;
  std::map<std::string, const Tensor*> by_name_;
};

}  // namespace

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

std::unique_ptr<HybridLM> model_from_weights(const ModelWeights& w) {
  const std::optional<int64_t> vocab_size = vocab_size_of(w);
  LAT_CHECK(vocab_size.has_value(), "model_from_weights: '" << w.path << "' has no 2-D tensor 'embeddings.weight'");
  SizeChecks(w).run();
  // After the sizes: a config.json contradicting a lat_config that matches the tensors.
  if (w.export_config_json)
    check_config_json_agrees(*w.export_config_json, w.export_config_path, w.config, *vocab_size,
                             w.checkpoint.tokenizer_type);
  Generator gen(0);  // the initialization is overwritten: load_weights sets every parameter
  auto model = std::make_unique<HybridLM>(hybrid_lm_config(w.config.model, *vocab_size), gen);
  load_weights(*model, w.checkpoint.model, w.path);
  return model;
}

TrainedModel load_trained_model(const std::string& checkpoint) {
  const ModelWeights weights = load_model_weights(checkpoint);
  TrainedModel t;
  t.path = weights.path;
  t.config = weights.config;
  t.step = weights.checkpoint.step;
  t.tokenizer = checkpoint_tokenizer(weights.checkpoint);
  t.model = model_from_weights(weights);
  return t;
}

}  // namespace lat
