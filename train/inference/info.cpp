// `lat info`: parameter counts and generation memory (definitions in info.h).
#include "train/inference/info.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "data/dataset.h"
#include "lat/precision.h"
#include "train/config/data_options.h"
#include "train/config/model_config.h"
#include "train/files/hf_export.h"
#include "train/files/model_reader.h"
#include "train/files/tokenizer_files.h"
#include "train/files/trained_model.h"
#include "train/text/format.h"

namespace lat {
namespace {

/// The row a parameter is counted in.
std::string group_of(const std::string& name, const std::vector<std::string>& kinds) {
  if (name.rfind("layers.", 0) == 0) {
    const size_t dot = name.find('.', 7);
    const std::string layer = name.substr(0, dot);
    const std::string rest = name.substr(dot + 1);
    if (rest.rfind("attn.", 0) == 0) return layer + ".attn (" + kinds.at(std::stoul(name.substr(7, dot - 7))) + ")";
    if (rest.rfind("mlp.", 0) == 0) return layer + ".mlp";
    return "norms";  // attn_norm, mlp_norm
  }
  if (name == "norm.weight") return "norms";
  return name.substr(0, name.find('.'));  // embeddings, lm_head
}

/// "1,234,567".
std::string grouped(int64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

/// "1.50 MiB" for a number of f32 elements.
std::string bytes_of(int64_t floats) {
  double bytes = 4.0 * static_cast<double>(floats);
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return text;
}

/// "1.23M" parameters.
std::string short_count(int64_t n) {
  char text[32];
  if (n >= 1'000'000'000)
    std::snprintf(text, sizeof text, "%.2fB", static_cast<double>(n) / 1e9);
  else if (n >= 1'000'000)
    std::snprintf(text, sizeof text, "%.2fM", static_cast<double>(n) / 1e6);
  else
    std::snprintf(text, sizeof text, "%.1fK", static_cast<double>(n) / 1e3);
  return text;
}

std::string loss_text(double loss) {
  if (std::isnan(loss)) return "not evaluated";
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", loss);
  return text;
}

/// The vocabulary size a run of `config` would use: model.vocab_size, else its data's.
int64_t config_vocab_size(const Config& config) {
  if (config.model.vocab_size > 0) return config.model.vocab_size;
  if (config.data.task != "none") return synthetic_task(config).vocab_size();
  return run_vocab_size(config.model, load_data(data_options(config)));
}

void check_context(int64_t context) {
  LAT_CHECK(context >= 1 && context <= kMaxContext,
            "lat info: --context: expected an int in [1, 2^40], got " << context);
}

/// The info of `model`, built from `config`, at `context` tokens.
ModelInfo describe_model(const Config& config, const HybridLM& model, int64_t context) {
  const int64_t vocab_size = model.vocab_size();
  ModelInfo info;
  info.config = config;
  info.vocab_size = vocab_size;
  info.context = context;
  const ModelConfig& m = config.model;
  const std::vector<std::string> kinds = layer_mixers(m);

  int64_t norms = 0;
  for (const auto& [name, tensor] : model.named_parameters()) {
    const std::string group = group_of(name, kinds);
    info.total_params += tensor.numel();
    if (group == "norms") {
      norms += tensor.numel();
      continue;
    }
    if (group == "lm_head") continue;  // last row, below
    if (info.params.empty() || info.params.back().name != group) info.params.push_back({group, 0});
    info.params.back().count += tensor.numel();
  }
  info.params.push_back({"norms", norms});
  info.params.push_back({m.tie_embeddings ? "lm_head (tied to embeddings)" : "lm_head",
                         m.tie_embeddings ? 0 : vocab_size * m.d_model});

  // Linear layers: n_heads key heads of K; gdn and delta_net hold n_v_heads value heads (each
  // with its own K x V state). Attention: its own kv heads of attn.head_dim (resolved configs).
  const int64_t H = m.n_heads, K = m.head_dim, V = value_head_dim(m);
  const int64_t attn_head_dim = m.attn.head_dim > 0 ? m.attn.head_dim : m.head_dim;
  const int64_t attn_rows = m.attn.window_size > 0 ? std::min(context, m.attn.window_size) : context;
  const int64_t kv_cache = 2 * attn_rows * m.attn.n_kv_heads * attn_head_dim;
  for (size_t i = 0; i < kinds.size(); ++i) {
    LayerMemory layer{static_cast<int64_t>(i), kinds[i], 0, 0};
    if (kinds[i] == "attn") {
      layer.state = kv_cache;
    } else if (kinds[i] == "mla") {
      // The normed latent and the shared key part of each token in the window.
      const MlaConfig& mla = m.mla;
      const int64_t heads = m.attn.n_heads > 0 ? m.attn.n_heads : m.n_heads;
      layer.cache_per_token = mla.kv_lora_rank + mla.qk_rope_head_dim;
      layer.plain_kv_per_token = heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim);
      layer.state = attn_rows * layer.cache_per_token;
    } else if (kinds[i] == "mamba2") {
      // SSM state [H, N, P] (H * P = d_inner) and the conv state of x, B and C.
      const MambaConfig& mamba = m.mamba;
      const int64_t d_inner = mamba.expand * m.d_model;
      layer.state = d_inner * mamba.d_state;
      layer.conv = (mamba.conv_size - 1) * (d_inner + 2 * mamba.n_groups * mamba.d_state);
    } else {
      const bool normalized = kinds[i] == "linear_attn" && m.linear.normalize;
      const bool grouped = kinds[i] == "gdn" || kinds[i] == "delta_net";
      const int64_t Hv = grouped && m.linear.n_v_heads > 0 ? m.linear.n_v_heads : H;
      layer.state = Hv * K * (V + (normalized ? 1 : 0));
      if (kinds[i] != "linear_attn" && m.linear.use_short_conv)
        layer.conv = (m.linear.conv_size - 1) * (2 * H * K + Hv * V);
    }
    info.memory_total += layer.state + layer.conv;
    info.memory.push_back(layer);
  }
  // The comparison is the standard transformer: every layer full attention over the context.
  info.attention_only_total = m.n_layers * 2 * context * m.attn.n_kv_heads * attn_head_dim;
  return info;
}

}  // namespace

ModelInfo model_info(const Config& config, int64_t vocab_size, int64_t context) {
  check_context(context);
  Generator gen(0);
  const HybridLM model(hybrid_lm_config(config.model, vocab_size), gen);
  return describe_model(config, model, context);
}

ModelInfo inspect(const std::string& path, int64_t context) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".yaml" || ext == ".yml") {
    const Config config = load_config(path);
    return model_info(config, config_vocab_size(config), context);
  }
  check_context(context);
  // What generate and eval would load: the stored config through the validator, the
  // tokenizer against the embeddings, finite weights, the sizes and then every shape
  // against the config. The figures are those of the model that loads.
  const ModelWeights w = load_model_weights(path);
  const Checkpoint& c = w.checkpoint;
  const std::unique_ptr<HybridLM> model = model_from_weights(w);
  ModelInfo info = describe_model(w.config, *model, context);
  const std::string hf_config =
      w.format == ModelFormat::hf ? (std::filesystem::path(w.path).parent_path() / hf_layout::kConfigFile).string()
                                  : std::string();
  ModelInfo::CheckpointFacts facts;
  facts.path = w.path;
  facts.step = c.step;
  facts.tokens_seen = c.tokens_seen;
  facts.val_loss = c.val_loss;
  facts.best_val_loss = c.best_val_loss;
  facts.created = c.created;
  facts.lat_version = c.lat_version;
  facts.frozen = c.frozen;
  facts.hf_config = hf_config;
  facts.tokenizer_type = c.tokenizer_type;
  info.checkpoint = std::move(facts);
  if (const std::optional<Tokenizer> tokenizer = checkpoint_tokenizer(c)) {
    info.checkpoint->tokenizer_tokens = tokenizer->vocab_size();
    if (const SubwordModel* subword = tokenizer->subword_model()) info.checkpoint->tokenizer_file = subword->file_name();
  }
  return info;
}

std::string format_info(const ModelInfo& info) {
  const ModelConfig& m = info.config.model;
  std::ostringstream out;
  out << "model: " << m.n_layers << " layers (" << join(layer_mixers(m), ",") << "), d_model " << m.d_model << ", " << m.n_heads
      << " heads x " << m.head_dim << ", value head dim " << value_head_dim(m);
  if (m.linear.n_v_heads > 0 && m.linear.n_v_heads != m.n_heads) out << " (" << m.linear.n_v_heads << " value heads)";
  const std::vector<std::string> kinds = layer_mixers(m);
  const auto has = [&](const char* kind) { return std::find(kinds.begin(), kinds.end(), kind) != kinds.end(); };
  const int64_t attn_heads = m.attn.n_heads > 0 ? m.attn.n_heads : m.n_heads;
  if (has("attn"))
    out << "; attention " << attn_heads << " heads x " << (m.attn.head_dim > 0 ? m.attn.head_dim : m.head_dim)
        << ", kv heads " << m.attn.n_kv_heads;
  if (has("mla")) {
    const MlaConfig& mla = m.mla;
    out << "; mla " << attn_heads << " heads, latent " << mla.kv_lora_rank << ", q/k " << mla.qk_nope_head_dim << " + "
        << mla.qk_rope_head_dim << " shared" << (mla.rope ? " (RoPE)" : "") << ", v " << mla.v_head_dim;
    if (mla.q_lora_rank > 0) out << ", q_lora_rank " << mla.q_lora_rank;
  }
  if (has("mamba2"))
    out << "; mamba2 " << m.mamba.expand * m.d_model / m.mamba.head_dim << " heads x " << m.mamba.head_dim
        << ", d_state " << m.mamba.d_state << ", " << m.mamba.n_groups << (m.mamba.n_groups == 1 ? " group" : " groups");
  out << "; vocab " << info.vocab_size << "\n";
  out << "precision: train.precision " << info.config.train.precision << ", in effect on this CPU: "
      << precision_name(effective_precision(parse_precision(info.config.train.precision), Device::cpu())) << "\n";

  out << "\nparameters\n";
  size_t width = 5;
  for (const ParamCount& p : info.params) width = std::max(width, p.name.size());
  char line[256];
  for (const ParamCount& p : info.params) {
    std::snprintf(line, sizeof line, "  %-*s %15s\n", static_cast<int>(width), p.name.c_str(), grouped(p.count).c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "  %-*s %15s (%s)\n", static_cast<int>(width), "total",
                grouped(info.total_params).c_str(), short_count(info.total_params).c_str());
  out << line;

  out << "\ngeneration memory at context " << info.context << " (f32, per sequence)\n";
  std::snprintf(line, sizeof line, "  %-5s %-11s %-24s %15s %12s\n", "layer", "kind", "holds", "floats", "bytes");
  out << line;
  for (const LayerMemory& l : info.memory) {
    const std::string what = l.kind == "attn"  ? "KV cache"
                             : l.kind == "mla" ? "latent cache"
                             : l.conv > 0      ? "recurrent + conv"
                                               : "recurrent";
    std::snprintf(line, sizeof line, "  %-5lld %-11s %-24s %15s %12s\n", static_cast<long long>(l.layer),
                  l.kind.c_str(), what.c_str(), grouped(l.state + l.conv).c_str(),
                  bytes_of(l.state + l.conv).c_str());
    out << line;
    if (l.kind == "mla")
      out << "        per token " << bytes_of(l.cache_per_token) << " (latent + shared key); a plain KV cache of the "
          << "same heads: " << bytes_of(l.plain_kv_per_token) << "\n";
  }
  std::snprintf(line, sizeof line, "  %-42s %15s %12s\n", "total", grouped(info.memory_total).c_str(),
                bytes_of(info.memory_total).c_str());
  out << line;
  std::snprintf(line, sizeof line, "  %-42s %15s %12s\n", "attention-only, same shape, full attention",
                grouped(info.attention_only_total).c_str(), bytes_of(info.attention_only_total).c_str());
  out << line;
  if (info.memory_total > 0) {
    const bool attention_only = std::all_of(info.memory.begin(), info.memory.end(),
                                            [](const LayerMemory& l) { return l.kind == "attn" || l.kind == "mla"; });
    std::snprintf(line, sizeof line, "  this %s needs %.3gx the memory of the full-attention model\n",
                  attention_only ? "model" : "hybrid",
                  static_cast<double>(info.memory_total) / static_cast<double>(info.attention_only_total));
    out << line;
  }

  if (info.checkpoint) {
    const ModelInfo::CheckpointFacts& c = *info.checkpoint;
    out << "\ncheckpoint " << c.path << "\n"
        << "  step " << c.step << ", tokens seen " << grouped(c.tokens_seen) << "\n"
        << "  val loss " << loss_text(c.val_loss) << " (best " << loss_text(c.best_val_loss) << ")\n"
        << "  created " << (c.created.empty() ? "-" : c.created) << " by lat "
        << (c.lat_version.empty() ? "-" : c.lat_version)
        << (c.hf_config.empty() ? "" : " (a Hugging Face directory records neither)")
        << "\n  frozen " << (c.frozen.empty() ? std::string("none") : std::to_string(c.frozen.size()) + " parameters")
        << "\n";
    for (const std::string& name : c.frozen) out << "    " << name << "\n";
    out << "  tokenizer " << (c.tokenizer_type.empty() ? std::string("none") : c.tokenizer_type);
    if (c.tokenizer_tokens > 0) out << ", " << grouped(c.tokenizer_tokens) << " tokens";
    if (!c.tokenizer_file.empty()) out << " (" << c.tokenizer_file << ")";
    if (c.tokenizer_tokens == 0) out << " (the model reads and writes token ids)";
    out << "\n";
    if (c.tokenizer_tokens > 0 && c.tokenizer_tokens < info.vocab_size)
      out << "  tokenizer " << c.tokenizer_tokens << " tokens, embeddings " << info.vocab_size << " rows: ids "
          << c.tokenizer_tokens << ".." << info.vocab_size - 1
          << " pad the vocabulary (the tokenizer cannot decode them; generate never draws them)\n";
  }
  const bool hf = info.checkpoint && !info.checkpoint->hf_config.empty();
  if (hf)
    out << "\nmodel keys read from " << info.checkpoint->hf_config
        << " (copy them into a run config to fine-tune with init_from)\n";
  else
    out << "\nconfig\n";
  std::istringstream yaml(to_yaml(info.config));
  for (std::string l; std::getline(yaml, l);) {
    // The YAML is nested by section: the model section ends at the next top-level key.
    if (hf && !l.empty() && l[0] != ' ' && l.rfind("model:", 0) != 0) break;
    out << "  " << l;
    // lat's compute schedule, not a property of the model: config.json has no such key.
    if (hf && l.find("chunk_size:") != std::string::npos) out << "  # lat's default, not from config.json";
    out << "\n";
  }
  return out.str();
}

}  // namespace lat
