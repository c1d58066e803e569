// Cross-key checks and derived defaults (rules.h).
#include "train/config/rules.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "layers/linear_attention/common.h"
#include "layers/mixer.h"
#include "train/config/suggest.h"
#include "train/config/validation.h"
#include "train/text/format.h"

namespace lat {
namespace {

/// The key to blame for a head dim: model.head_dim when set, else the d_model it came from.
std::string head_dim_key(const Validation& v) {
  return v.was_set("model.head_dim") ? "model.head_dim" : "model.d_model";
}

}  // namespace

void resolve_head_dim(Validation& v) {
  ModelConfig& m = v.config().model;
  if (m.head_dim != 0) return;
  if (m.d_model % m.n_heads != 0) {
    const std::string key = v.was_set("model.n_heads") ? "model.n_heads" : "model.d_model";
    v.fail(key, "model.d_model (" + std::to_string(m.d_model) + ") is not divisible by model.n_heads (" +
                    std::to_string(m.n_heads) + "); set model.head_dim or change one of them");
  }
  m.head_dim = m.d_model / m.n_heads;
}

void check_layers(Validation& v) {
  const ModelConfig& m = v.config().model;
  const std::vector<std::string> pattern = mixer_pattern(m.layers);
  if (pattern.empty()) v.fail("model.layers", "expected at least one mixer name, got '" + m.layers + "'");
  const std::vector<std::string>& kinds = mixer_kinds();
  for (const std::string& mixer : pattern) {
    if (mixer.empty()) v.fail("model.layers", "empty mixer name in '" + m.layers + "'");
    if (std::find(kinds.begin(), kinds.end(), mixer) == kinds.end())
      v.fail("model.layers", "unknown mixer '" + mixer + "'" + did_you_mean(mixer, kinds) + " (expected " +
                                 join(kinds, ", ") + ")");
  }
  // A shorter pattern repeats; a longer one would silently drop mixers.
  if (static_cast<int64_t>(pattern.size()) > m.n_layers)
    v.fail("model.layers", "has " + std::to_string(pattern.size()) + " mixers but model.n_layers is " +
                               std::to_string(m.n_layers) + " (the pattern repeats to n_layers, so give at most " +
                               std::to_string(m.n_layers) + ")");
}

void check_head_dims(Validation& v) {
  const ModelConfig& m = v.config().model;
  const double value_dim = static_cast<double>(m.head_dim) * m.expand_v;
  if (value_dim < 1 || value_dim != std::round(value_dim))
    v.fail("model.expand_v", "head_dim (" + std::to_string(m.head_dim) + ") * expand_v must be a whole number >= 1");
  const std::vector<std::string> pattern = mixer_pattern(m.layers);
  const bool has_linear = std::any_of(pattern.begin(), pattern.end(), [](const std::string& k) { return k != "attn"; });
  const bool has_attn = std::find(pattern.begin(), pattern.end(), "attn") != pattern.end();
  if (has_attn && m.head_dim % 2 != 0)
    v.fail(head_dim_key(v), "attention layers need an even head_dim (RoPE rotates pairs of dimensions), got head_dim " +
                                std::to_string(m.head_dim) + " (d_model / n_heads unless model.head_dim is set)");
  const int64_t limit = linear_attention::kMaxHeadDim;
  if (has_linear && (m.head_dim > limit || value_dim > static_cast<double>(limit)))
    v.fail(head_dim_key(v), "the linear-attention kernels take head dimensions up to " + std::to_string(limit) +
                                ", got head_dim " + std::to_string(m.head_dim) + " and value dim " +
                                std::to_string(static_cast<int64_t>(value_dim)));
}

void resolve_kv_heads(Validation& v) {
  ModelConfig& m = v.config().model;
  if (m.attn.n_kv_heads == 0) m.attn.n_kv_heads = m.n_heads;
  if (m.n_heads % m.attn.n_kv_heads != 0)
    v.fail("model.attn.n_kv_heads", "model.n_heads (" + std::to_string(m.n_heads) +
                                        ") is not a multiple of model.attn.n_kv_heads (" +
                                        std::to_string(m.attn.n_kv_heads) + ")");
}

void check_min_lr(Validation& v) {
  const TrainConfig& t = v.config().train;
  if (t.min_lr <= t.lr) return;
  std::ostringstream os;
  os << "min_lr (" << t.min_lr << ") is above train.lr (" << t.lr << ")";
  v.fail(v.was_set("train.min_lr") ? "train.min_lr" : "train.lr", os.str());
}

void resolve_out_dir(Validation& v) {
  std::string& out_dir = v.config().train.out_dir;
  if (!out_dir.empty()) return;
  if (v.was_set("train.out_dir")) v.fail("train.out_dir", "expected a directory, got ''");
  out_dir = "runs/" + v.config_name();
}

void check_resume_path(Validation& v) {
  const std::string& resume = v.config().train.resume;
  if (v.check_paths() && resume != "auto" && resume != "never" && !std::filesystem::exists(resume))
    v.fail("train.resume", "expected auto, never or an existing checkpoint path, got '" + resume + "'" +
                               did_you_mean(resume, {"auto", "never"}));
}

void check_device(Validation& v) {
  const std::string& device = v.config().train.device;
  bool ok = device == "cpu" || device == "cuda";
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5)
    ok = std::all_of(device.begin() + 5, device.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!ok) v.fail("train.device", "unknown device '" + device + "' (expected cpu, cuda or cuda:N)");
}

void check_init_from(Validation& v) {
  const std::string& init_from = v.config().init_from;
  if (v.check_paths() && !init_from.empty() && !std::filesystem::exists(init_from))
    v.fail("init_from", "no such checkpoint: '" + init_from + "'");
}

}  // namespace lat
