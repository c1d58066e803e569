// Config loading: a schema table (one row per key) drives parsing, overrides, to_yaml and
// the resume comparison, so a key added to the table is handled everywhere at once.
#include "train/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <variant>

#include <yaml-cpp/yaml.h>

namespace lat {
namespace {

using FloatMap = std::vector<std::pair<std::string, double>>;
/// A pointer to the Config field behind a key; the alternative gives the key's YAML type.
using FieldPtr = std::variant<int64_t*, double*, bool*, std::string*, std::array<double, 2>*,
                              std::vector<std::string>*, FloatMap*, std::vector<int64_t>*>;

struct KeySpec {
  const char* key;
  FieldPtr (*field)(Config&);
  bool nullable = false;  // a string key whose default is "not set" (YAML null accepted)
};

// The schema of DESIGN.md, in its order; to_yaml writes the keys in this order.
const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> keys = {
      {"model.vocab_size", [](Config& c) -> FieldPtr { return &c.model.vocab_size; }},
      {"model.d_model", [](Config& c) -> FieldPtr { return &c.model.d_model; }},
      {"model.n_layers", [](Config& c) -> FieldPtr { return &c.model.n_layers; }},
      {"model.n_heads", [](Config& c) -> FieldPtr { return &c.model.n_heads; }},
      {"model.head_dim", [](Config& c) -> FieldPtr { return &c.model.head_dim; }},
      {"model.layers", [](Config& c) -> FieldPtr { return &c.model.layers; }},
      {"model.expand_v", [](Config& c) -> FieldPtr { return &c.model.expand_v; }},
      {"model.mlp_ratio", [](Config& c) -> FieldPtr { return &c.model.mlp_ratio; }},
      {"model.norm_eps", [](Config& c) -> FieldPtr { return &c.model.norm_eps; }},
      {"model.tie_embeddings", [](Config& c) -> FieldPtr { return &c.model.tie_embeddings; }},
      {"model.attn.window_size", [](Config& c) -> FieldPtr { return &c.model.attn.window_size; }},
      {"model.attn.n_kv_heads", [](Config& c) -> FieldPtr { return &c.model.attn.n_kv_heads; }},
      {"model.attn.rope_theta", [](Config& c) -> FieldPtr { return &c.model.attn.rope_theta; }},
      {"model.linear.feature_map", [](Config& c) -> FieldPtr { return &c.model.linear.feature_map; }},
      {"model.linear.normalize", [](Config& c) -> FieldPtr { return &c.model.linear.normalize; }},
      {"model.linear.use_short_conv", [](Config& c) -> FieldPtr { return &c.model.linear.use_short_conv; }},
      {"model.linear.conv_size", [](Config& c) -> FieldPtr { return &c.model.linear.conv_size; }},
      {"model.linear.use_gate", [](Config& c) -> FieldPtr { return &c.model.linear.use_gate; }},
      {"model.linear.chunk_size", [](Config& c) -> FieldPtr { return &c.model.linear.chunk_size; }},
      {"data.path", [](Config& c) -> FieldPtr { return &c.data.path; }, true},
      {"data.format", [](Config& c) -> FieldPtr { return &c.data.format; }},
      {"data.tokenizer", [](Config& c) -> FieldPtr { return &c.data.tokenizer; }},
      {"data.bin_dtype", [](Config& c) -> FieldPtr { return &c.data.bin_dtype; }},
      {"data.h5_dataset", [](Config& c) -> FieldPtr { return &c.data.h5_dataset; }},
      {"data.block_size", [](Config& c) -> FieldPtr { return &c.data.block_size; }},
      {"data.val_fraction", [](Config& c) -> FieldPtr { return &c.data.val_fraction; }},
      {"data.task", [](Config& c) -> FieldPtr { return &c.data.task; }},
      {"data.mqar.vocab", [](Config& c) -> FieldPtr { return &c.data.mqar.vocab; }},
      {"data.mqar.pairs", [](Config& c) -> FieldPtr { return &c.data.mqar.pairs; }},
      {"data.mqar.alpha", [](Config& c) -> FieldPtr { return &c.data.mqar.alpha; }},
      {"data.copy.length", [](Config& c) -> FieldPtr { return &c.data.copy.length; }},
      {"train.batch_size", [](Config& c) -> FieldPtr { return &c.train.batch_size; }},
      {"train.grad_accum", [](Config& c) -> FieldPtr { return &c.train.grad_accum; }},
      {"train.max_steps", [](Config& c) -> FieldPtr { return &c.train.max_steps; }},
      {"train.stop_at", [](Config& c) -> FieldPtr { return &c.train.stop_at; }},
      {"train.optimizer", [](Config& c) -> FieldPtr { return &c.train.optimizer; }},
      {"train.lr", [](Config& c) -> FieldPtr { return &c.train.lr; }},
      {"train.min_lr", [](Config& c) -> FieldPtr { return &c.train.min_lr; }},
      {"train.warmup", [](Config& c) -> FieldPtr { return &c.train.warmup; }},
      {"train.schedule", [](Config& c) -> FieldPtr { return &c.train.schedule; }},
      {"train.betas", [](Config& c) -> FieldPtr { return &c.train.betas; }},
      {"train.eps", [](Config& c) -> FieldPtr { return &c.train.eps; }},
      {"train.weight_decay", [](Config& c) -> FieldPtr { return &c.train.weight_decay; }},
      {"train.momentum", [](Config& c) -> FieldPtr { return &c.train.momentum; }},
      {"train.grad_clip", [](Config& c) -> FieldPtr { return &c.train.grad_clip; }},
      {"train.eval_every", [](Config& c) -> FieldPtr { return &c.train.eval_every; }},
      {"train.eval_batches", [](Config& c) -> FieldPtr { return &c.train.eval_batches; }},
      {"train.log_every", [](Config& c) -> FieldPtr { return &c.train.log_every; }},
      {"train.ckpt_every", [](Config& c) -> FieldPtr { return &c.train.ckpt_every; }},
      {"train.keep_last", [](Config& c) -> FieldPtr { return &c.train.keep_last; }},
      {"train.out_dir", [](Config& c) -> FieldPtr { return &c.train.out_dir; }},
      {"train.resume", [](Config& c) -> FieldPtr { return &c.train.resume; }},
      {"train.seed", [](Config& c) -> FieldPtr { return &c.train.seed; }},
      {"train.device", [](Config& c) -> FieldPtr { return &c.train.device; }},
      {"train.threads", [](Config& c) -> FieldPtr { return &c.train.threads; }},
      {"init_from", [](Config& c) -> FieldPtr { return &c.init_from; }, true},
      {"init_from_strict", [](Config& c) -> FieldPtr { return &c.init_from_strict; }},
      {"freeze", [](Config& c) -> FieldPtr { return &c.freeze; }},
      {"lr_mult", [](Config& c) -> FieldPtr { return &c.lr_mult; }},
  };
  return keys;
}

/// Sections hold keys; in a file they are nested maps or a prefix of dotted keys.
const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = {"model", "model.attn", "model.linear", "data", "data.mqar", "data.copy",
                                                 "train"};
  return names;
}

const KeySpec* find_key(const std::string& key) {
  for (const KeySpec& spec : schema())
    if (key == spec.key) return &spec;
  return nullptr;
}

bool is_section(const std::string& key) {
  return std::find(sections().begin(), sections().end(), key) != sections().end();
}

const std::vector<std::string> kMixers = {"attn", "linear_attn", "simple_gla", "retention", "delta_net", "gdn"};

// ---- suggestions --------------------------------------------------------------------------

/// Optimal string alignment distance: Levenshtein plus adjacent transpositions, so that
/// "d_modle" is one edit from "d_model".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string last_component(const std::string& key) {
  auto pos = key.rfind('.');
  return pos == std::string::npos ? key : key.substr(pos + 1);
}

/// The candidate nearest to `name`, or "" when none is near. A key also matches by its last
/// component, so `lr` at the top level suggests `train.lr`.
std::string suggest(const std::string& name, const std::vector<std::string>& candidates) {
  const std::string last = last_component(name);
  const size_t limit = last.size() <= 3 ? 1 : std::max<size_t>(2, last.size() / 3);
  std::string best;
  std::pair<size_t, size_t> best_score{std::numeric_limits<size_t>::max(), 0};
  for (const std::string& candidate : candidates) {
    size_t full = edit_distance(name, candidate);
    size_t tail = edit_distance(last, last_component(candidate));
    std::pair<size_t, size_t> score{std::min(full, tail), full};
    if (score < best_score) {
      best_score = score;
      best = candidate;
    }
  }
  return best_score.first <= limit ? best : "";
}

std::vector<std::string> all_key_names() {
  std::vector<std::string> names;
  for (const KeySpec& spec : schema()) names.push_back(spec.key);
  for (const std::string& section : sections()) names.push_back(section);
  return names;
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  std::string near = suggest(name, candidates);
  return near.empty() ? "" : ", did you mean '" + near + "'?";
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

/// The comma-separated mixer names of model.layers, trimmed (empty entries kept, to be reported).
std::vector<std::string> split_pattern(const std::string& layers) {
  std::vector<std::string> names;
  std::stringstream ss(layers);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    names.push_back(first == std::string::npos ? "" : item.substr(first, item.find_last_not_of(" \t") + 1 - first));
  }
  return names;
}

// ---- scalar parsing -----------------------------------------------------------------------

/// What a node is, for "got ..." in messages.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "nothing (null)";
  }
}

bool parse_double_text(std::string text, double& out) {
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty() && std::isfinite(out);
}

bool parse_int_text(std::string text, int64_t& out) {
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  if (ec == std::errc() && ptr == end && !text.empty()) return true;
  // Accept an integral float such as 1e4 (max_steps: 1e4).
  double value = 0;
  if (!parse_double_text(text, value) || value != std::floor(value) || std::fabs(value) > 9.0e15) return false;
  out = static_cast<int64_t>(value);
  return true;
}

// ---- the loader ---------------------------------------------------------------------------

/// Builds a Config from defaults, files and overrides, remembering where each key was set.
class Loader {
 public:
  /// `source` (the file or string name) is named for keys that were never set.
  explicit Loader(std::string source) : source_(std::move(source)) {}

  /// Applies a parsed document (the whole file) read from `file`.
  void apply_document(const YAML::Node& root, const std::string& file) {
    if (root.IsNull()) return;
    if (!root.IsMap())
      throw ConfigError("config: expected a map of keys at the top level, got " + describe(root) + " (" +
                        at(file, root) + ")");
    std::map<std::string, std::string> leaves_seen;  // leaf key -> location of its first setting
    walk(root, "", file, &leaves_seen);
  }

  /// Applies one "key=value" override.
  void apply_override(const std::string& assignment) {
    auto eq = assignment.find('=');
    std::string key = assignment.substr(0, eq);
    if (eq == std::string::npos || key.empty())
      throw ConfigError("--set '" + assignment + "': expected key=value");
    const std::string location = "--set " + key;
    YAML::Node value;
    try {
      value = YAML::Load(assignment.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw ConfigError(key + ": cannot parse the value as YAML: " + e.msg + " (" + location + ")");
    }
    if (const KeySpec* spec = find_key(key)) {
      set_leaf(*spec, value, location, "");
    } else if (is_section(key)) {
      if (!value.IsMap())
        throw ConfigError(key + ": expected a map of keys, got " + describe(value) + " (" + location + ")");
      walk(value, key, "", nullptr, location);
    } else {
      throw ConfigError(key + ": unknown key" + did_you_mean(key, all_key_names()) + " (" + location + ")");
    }
  }

  Config& config() { return config_; }

  /// "file:line" or "--set key" where `key` was last set; "not set in <source>" otherwise.
  std::string where(const std::string& key) const {
    auto it = where_.find(key);
    return it == where_.end() ? "not set in " + source_ : it->second;
  }

  bool was_set(const std::string& key) const { return where_.count(key) != 0; }

 private:
  static std::string at(const std::string& file, const YAML::Node& node) {
    return file + ":" + std::to_string(node.Mark().line + 1);
  }

  /// Walks a map under `prefix`. In a file (`file` non-empty) each key's location is its line;
  /// for an override every key reports `override_location`.
  void walk(const YAML::Node& map, const std::string& prefix, const std::string& file,
            std::map<std::string, std::string>* leaves_seen, const std::string& override_location = "") {
    std::map<std::string, int> keys_here;  // literal keys of this map -> line, for duplicates
    for (const auto& entry : map) {
      const YAML::Node& key_node = entry.first;
      const YAML::Node& value = entry.second;
      const std::string location = file.empty() ? override_location : at(file, key_node);
      if (!key_node.IsScalar())
        throw ConfigError((prefix.empty() ? "config" : prefix) + ": expected a key name, got " +
                          describe(key_node) + " (" + location + ")");
      const std::string name = key_node.Scalar();
      const std::string key = prefix.empty() ? name : prefix + "." + name;
      const int line = key_node.Mark().line + 1;
      if (auto [seen, inserted] = keys_here.emplace(name, line); !inserted)
        throw ConfigError(key + ": duplicate key, first set at line " + std::to_string(seen->second) + " (" +
                          location + ")");
      if (const KeySpec* spec = find_key(key)) {
        if (leaves_seen) {
          if (auto [seen, inserted] = leaves_seen->emplace(key, location); !inserted)
            throw ConfigError(key + ": duplicate key, first set at " + seen->second + " (" + location + ")");
        }
        set_leaf(*spec, value, location, file);
      } else if (is_section(key)) {
        if (value.IsNull()) continue;  // an empty section, e.g. "train:" with nothing below
        if (!value.IsMap())
          throw ConfigError(key + ": expected a map of keys, got " + describe(value) + " (" + location + ")");
        walk(value, key, file, leaves_seen, override_location);
      } else {
        throw ConfigError(key + ": unknown key" + did_you_mean(key, all_key_names()) + " (" + location + ")");
      }
    }
  }

  [[noreturn]] static void type_error(const std::string& key, const std::string& expected, const YAML::Node& value,
                                      const std::string& location) {
    throw ConfigError(key + ": expected " + expected + ", got " + describe(value) + " (" + location + ")");
  }

  static double to_float(const std::string& key, const YAML::Node& value, const std::string& location) {
    double out = 0;
    if (!value.IsScalar() || !parse_double_text(value.Scalar(), out)) type_error(key, "a float", value, location);
    return out;
  }

  /// Sets one schema key from `value`. `file` is empty for an override; in a file, items of
  /// lists and maps are reported at their own line.
  void set_leaf(const KeySpec& spec, const YAML::Node& value, const std::string& location, const std::string& file) {
    const std::string key = spec.key;
    auto item_location = [&](const YAML::Node& item) { return file.empty() ? location : at(file, item); };
    where_[key] = location;
    std::visit(
        [&](auto* field) {
          using T = std::remove_pointer_t<decltype(field)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            if (!value.IsScalar() || !parse_int_text(value.Scalar(), *field))
              type_error(key, "an int", value, location);
          } else if constexpr (std::is_same_v<T, double>) {
            *field = to_float(key, value, location);
          } else if constexpr (std::is_same_v<T, bool>) {
            static const std::vector<std::string> yes = {"true", "True", "TRUE"}, no = {"false", "False", "FALSE"};
            const std::string text = value.IsScalar() ? value.Scalar() : "";
            if (std::find(yes.begin(), yes.end(), text) != yes.end()) *field = true;
            else if (std::find(no.begin(), no.end(), text) != no.end()) *field = false;
            else type_error(key, "true or false", value, location);
          } else if constexpr (std::is_same_v<T, std::string>) {
            if (spec.nullable && value.IsNull()) *field = "";
            else if (value.IsScalar()) *field = value.Scalar();
            else type_error(key, "a string", value, location);
          } else if constexpr (std::is_same_v<T, std::array<double, 2>>) {
            if (!value.IsSequence() || value.size() != 2) type_error(key, "a list of 2 floats", value, location);
            for (size_t i = 0; i < 2; ++i) (*field)[i] = to_float(key, value[i], item_location(value[i]));
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            field->clear();
            if (value.IsNull()) return;
            if (!value.IsSequence()) type_error(key, "a list of strings", value, location);
            for (const YAML::Node& item : value) {
              if (!item.IsScalar()) type_error(key, "a list of strings", item, item_location(item));
              field->push_back(item.Scalar());
            }
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            // An int, or a non-empty list of ints.
            field->clear();
            int64_t number = 0;
            if (value.IsScalar() && parse_int_text(value.Scalar(), number)) {
              field->push_back(number);
              return;
            }
            if (!value.IsSequence() || value.size() == 0) type_error(key, "an int or a list of ints", value, location);
            for (const YAML::Node& item : value) {
              if (!item.IsScalar() || !parse_int_text(item.Scalar(), number))
                type_error(key, "an int or a list of ints", item, item_location(item));
              field->push_back(number);
            }
          } else {
            field->clear();
            if (value.IsNull()) return;
            if (!value.IsMap()) type_error(key, "a map of pattern: float", value, location);
            for (const auto& entry : value) {
              const std::string here = item_location(entry.first);
              if (!entry.first.IsScalar()) type_error(key, "a pattern", entry.first, here);
              const std::string pattern = entry.first.Scalar();
              for (const auto& [seen, mult] : *field)
                if (seen == pattern) throw ConfigError(key + ": duplicate pattern '" + pattern + "' (" + here + ")");
              field->emplace_back(pattern, to_float(key, entry.second, here));
            }
          }
        },
        spec.field(config_));
  }

  std::string source_;
  Config config_;
  std::map<std::string, std::string> where_;
};

// ---- value checks -------------------------------------------------------------------------

/// Checks every value and resolves the derived defaults. `config_name` names the default
/// out_dir; `check_paths` asks that init_from and a resume path exist.
void resolve_and_check(Loader& loader, const std::string& config_name, bool check_paths) {
  Config& c = loader.config();
  auto fail = [&](const std::string& key, const std::string& message) {
    throw ConfigError(key + ": " + message + " (" + loader.where(key) + ")");
  };
  auto at_least = [&](const std::string& key, int64_t value, int64_t low) {
    if (value < low) fail(key, "expected an int >= " + std::to_string(low) + ", got " + std::to_string(value));
  };
  auto one_of = [&](const std::string& key, const std::string& value, const std::vector<std::string>& allowed) {
    if (std::find(allowed.begin(), allowed.end(), value) == allowed.end())
      fail(key, "unknown value '" + value + "'" + did_you_mean(value, allowed) + " (expected one of " +
                    join(allowed, ", ") + ")");
  };
  auto float_check = [&](const std::string& key, double value, bool ok, const std::string& expected) {
    if (!ok) {
      std::ostringstream os;
      os << "expected " << expected << ", got " << value;
      fail(key, os.str());
    }
  };

  // model
  at_least("model.vocab_size", c.model.vocab_size, 0);
  at_least("model.d_model", c.model.d_model, 1);
  at_least("model.n_layers", c.model.n_layers, 1);
  at_least("model.n_heads", c.model.n_heads, 1);
  at_least("model.head_dim", c.model.head_dim, 0);
  if (c.model.head_dim == 0) {
    if (c.model.d_model % c.model.n_heads != 0) {
      const std::string key = loader.was_set("model.n_heads") ? "model.n_heads" : "model.d_model";
      fail(key, "model.d_model (" + std::to_string(c.model.d_model) + ") is not divisible by model.n_heads (" +
                    std::to_string(c.model.n_heads) + "); set model.head_dim or change one of them");
    }
    c.model.head_dim = c.model.d_model / c.model.n_heads;
  }
  const std::vector<std::string> pattern = split_pattern(c.model.layers);
  if (pattern.empty()) fail("model.layers", "expected at least one mixer name, got '" + c.model.layers + "'");
  for (const std::string& mixer : pattern) {
    if (mixer.empty()) fail("model.layers", "empty mixer name in '" + c.model.layers + "'");
    if (std::find(kMixers.begin(), kMixers.end(), mixer) == kMixers.end())
      fail("model.layers", "unknown mixer '" + mixer + "'" + did_you_mean(mixer, kMixers) + " (expected " +
                               join(kMixers, ", ") + ")");
  }
  // A shorter pattern repeats; a longer one would silently drop mixers.
  if (static_cast<int64_t>(pattern.size()) > c.model.n_layers)
    fail("model.layers", "has " + std::to_string(pattern.size()) + " mixers but model.n_layers is " +
                             std::to_string(c.model.n_layers) + " (the pattern repeats to n_layers, so give at most " +
                             std::to_string(c.model.n_layers) + ")");
  float_check("model.expand_v", c.model.expand_v, c.model.expand_v > 0, "a float > 0");
  const double value_dim = static_cast<double>(c.model.head_dim) * c.model.expand_v;
  if (value_dim < 1 || value_dim != std::round(value_dim))
    fail("model.expand_v", "head_dim (" + std::to_string(c.model.head_dim) + ") * expand_v must be a whole number >= 1");
  const bool has_linear = std::any_of(pattern.begin(), pattern.end(), [](const std::string& m) { return m != "attn"; });
  const bool has_attn = std::find(pattern.begin(), pattern.end(), "attn") != pattern.end();
  if (has_attn && c.model.head_dim % 2 != 0)
    fail(loader.was_set("model.head_dim") ? "model.head_dim" : "model.d_model",
         "attention layers need an even head_dim (RoPE rotates pairs of dimensions), got head_dim " +
             std::to_string(c.model.head_dim) + " (d_model / n_heads unless model.head_dim is set)");
  if (has_linear && (c.model.head_dim > 256 || value_dim > 256))
    fail(loader.was_set("model.head_dim") ? "model.head_dim" : "model.d_model",
         "the linear-attention kernels take head dimensions up to 256, got head_dim " +
             std::to_string(c.model.head_dim) + " and value dim " + std::to_string(static_cast<int64_t>(value_dim)));
  float_check("model.mlp_ratio", c.model.mlp_ratio, c.model.mlp_ratio > 0, "a float > 0");
  float_check("model.norm_eps", c.model.norm_eps, c.model.norm_eps > 0, "a float > 0");
  at_least("model.attn.window_size", c.model.attn.window_size, 0);
  at_least("model.attn.n_kv_heads", c.model.attn.n_kv_heads, 0);
  if (c.model.attn.n_kv_heads == 0) c.model.attn.n_kv_heads = c.model.n_heads;
  if (c.model.n_heads % c.model.attn.n_kv_heads != 0)
    fail("model.attn.n_kv_heads", "model.n_heads (" + std::to_string(c.model.n_heads) +
                                       ") is not a multiple of model.attn.n_kv_heads (" +
                                       std::to_string(c.model.attn.n_kv_heads) + ")");
  float_check("model.attn.rope_theta", c.model.attn.rope_theta, c.model.attn.rope_theta > 0, "a float > 0");
  one_of("model.linear.feature_map", c.model.linear.feature_map, {"elu1", "relu", "identity"});
  at_least("model.linear.conv_size", c.model.linear.conv_size, 1);
  at_least("model.linear.chunk_size", c.model.linear.chunk_size, 1);

  // data
  one_of("data.task", c.data.task, {"none", "mqar", "copy"});
  const bool synthetic = c.data.task != "none";
  if (c.data.path.empty() && !synthetic) fail("data.path", "required: the text or token file to train on");
  if (!c.data.path.empty() && synthetic)
    fail("data.task", c.data.task + " generates its own sequences, but data.path is set too ('" + c.data.path +
                          "', " + loader.where("data.path") + "): remove one of them");
  one_of("data.format", c.data.format, {"auto", "text", "bin", "h5"});
  one_of("data.tokenizer", c.data.tokenizer, {"char", "byte"});
  one_of("data.bin_dtype", c.data.bin_dtype, {"uint16", "uint32"});
  if (c.data.h5_dataset.empty()) fail("data.h5_dataset", "expected a dataset name, got ''");
  at_least("data.block_size", c.data.block_size, 1);
  float_check("data.val_fraction", c.data.val_fraction, c.data.val_fraction > 0 && c.data.val_fraction < 1,
              "a float in (0, 1)");
  at_least("data.mqar.vocab", c.data.mqar.vocab, 4);
  for (int64_t pairs : c.data.mqar.pairs) at_least("data.mqar.pairs", pairs, 1);
  float_check("data.mqar.alpha", c.data.mqar.alpha, std::isfinite(c.data.mqar.alpha) && c.data.mqar.alpha > 0,
              "a float > 0");
  at_least("data.copy.length", c.data.copy.length, 1);
  if (c.data.task == "mqar") {
    const int64_t most = mqar_max_pairs(c.data.mqar.vocab, c.data.block_size);
    for (int64_t pairs : c.data.mqar.pairs)
      if (pairs > most)
        fail("data.mqar.pairs", std::to_string(pairs) + " pairs do not fit: at most " + std::to_string(most) +
                                    " with data.block_size " + std::to_string(c.data.block_size) +
                                    " and data.mqar.vocab " + std::to_string(c.data.mqar.vocab) +
                                    " (4 * pairs <= block_size, pairs < vocab / 2)");
  }
  if (c.data.task == "copy" && c.data.copy.length > copy_max_length(c.data.block_size))
    fail("data.copy.length", "a string of " + std::to_string(c.data.copy.length) + " tokens does not fit: at most " +
                                 std::to_string(copy_max_length(c.data.block_size)) + " with data.block_size " +
                                 std::to_string(c.data.block_size) + " (string, separator and copy: 2 * length <= block_size)");
  if (synthetic) {
    const int64_t task_vocab = c.data.task == "mqar" ? c.data.mqar.vocab : kCopyVocab;
    if (c.model.vocab_size > 0 && c.model.vocab_size < task_vocab)
      fail("model.vocab_size", std::to_string(c.model.vocab_size) + " is below the " + std::to_string(task_vocab) +
                                   " ids of data.task " + c.data.task + " (0 = the task's vocabulary)");
  }

  // train
  at_least("train.batch_size", c.train.batch_size, 1);
  at_least("train.grad_accum", c.train.grad_accum, 1);
  at_least("train.max_steps", c.train.max_steps, 1);
  at_least("train.stop_at", c.train.stop_at, 0);
  one_of("train.optimizer", c.train.optimizer, {"adamw", "sgd"});
  float_check("train.lr", c.train.lr, c.train.lr > 0, "a float > 0");
  float_check("train.min_lr", c.train.min_lr, c.train.min_lr >= 0, "a float >= 0");
  if (c.train.min_lr > c.train.lr) {
    std::ostringstream os;
    os << "min_lr (" << c.train.min_lr << ") is above train.lr (" << c.train.lr << ")";
    fail(loader.was_set("train.min_lr") ? "train.min_lr" : "train.lr", os.str());
  }
  at_least("train.warmup", c.train.warmup, 0);
  one_of("train.schedule", c.train.schedule, {"cosine", "linear", "constant"});
  for (double beta : c.train.betas) float_check("train.betas", beta, beta >= 0 && beta < 1, "floats in [0, 1)");
  float_check("train.eps", c.train.eps, c.train.eps > 0, "a float > 0");
  float_check("train.weight_decay", c.train.weight_decay, c.train.weight_decay >= 0, "a float >= 0");
  float_check("train.momentum", c.train.momentum, c.train.momentum >= 0 && c.train.momentum < 1, "a float in [0, 1)");
  float_check("train.grad_clip", c.train.grad_clip, c.train.grad_clip >= 0, "a float >= 0 (0 = off)");
  at_least("train.eval_every", c.train.eval_every, 0);
  at_least("train.eval_batches", c.train.eval_batches, 1);
  at_least("train.log_every", c.train.log_every, 1);
  at_least("train.ckpt_every", c.train.ckpt_every, 0);
  at_least("train.keep_last", c.train.keep_last, 0);
  if (c.train.out_dir.empty()) {
    if (loader.was_set("train.out_dir")) fail("train.out_dir", "expected a directory, got ''");
    c.train.out_dir = "runs/" + config_name;
  }
  const std::string& resume = c.train.resume;
  if (resume.empty()) fail("train.resume", "expected auto, never or a checkpoint path, got ''");
  if (check_paths && resume != "auto" && resume != "never" && !std::filesystem::exists(resume))
    fail("train.resume", "expected auto, never or an existing checkpoint path, got '" + resume + "'" +
                             did_you_mean(resume, {"auto", "never"}));
  at_least("train.seed", c.train.seed, 0);
  {
    const std::string& device = c.train.device;
    bool ok = device == "cpu" || device == "cuda";
    if (device.rfind("cuda:", 0) == 0 && device.size() > 5)
      ok = std::all_of(device.begin() + 5, device.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!ok)
fail("train.device", "unknown device '" + device + "' (expected cpu, cuda or cuda:N)");
  }
  at_least("train.threads", c.train.threads, 0);

  // fine-tuning
  if (check_paths && !c.init_from.empty() && !std::filesystem::exists(c.init_from))
    fail("init_from", "no such checkpoint: '" + c.init_from + "'");
  for (const std::string& pattern_text : c.freeze)
    if (pattern_text.empty()) fail("freeze", "expected a non-empty pattern");
  for (const auto& [pattern_text, mult] : c.lr_mult) {
    if (pattern_text.empty()) fail("lr_mult", "expected a non-empty pattern");
    float_check("lr_mult", mult, mult >= 0, "multipliers >= 0");
  }
}

Config build(const YAML::Node* root, const std::string& source, const std::vector<std::string>& overrides,
             bool check_paths) {
  Loader loader(source);
  if (root) loader.apply_document(*root, source);
  for (const std::string& assignment : overrides) loader.apply_override(assignment);
  resolve_and_check(loader, std::filesystem::path(source).stem().string(), check_paths);
  return loader.config();
}

YAML::Node parse_text(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError("config: YAML syntax error: " + e.msg + " (" + source + ":" + std::to_string(e.mark.line + 1) +
                      ")");
  } catch (const YAML::Exception& e) {
    throw ConfigError("config: cannot parse: " + e.msg + " (" + source + ")");
  }
}

// ---- emitting -----------------------------------------------------------------------------

/// Shortest text that parses back to the same double, with a ".0" on whole numbers so that
/// other YAML readers see a float too.
std::string float_text(double value) {
  char buffer[64];
  auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

void emit_value(YAML::Emitter& out, const FieldPtr& field, bool nullable) {
  std::visit(
      [&](auto* value) {
        using T = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out << *value;
        } else if constexpr (std::is_same_v<T, double>) {
          out << float_text(*value);
        } else if constexpr (std::is_same_v<T, bool>) {
          out << (*value ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (nullable && value->empty()) out << YAML::Null;
          else out << YAML::DoubleQuoted << *value;
        } else if constexpr (std::is_same_v<T, std::array<double, 2>>) {
          out << YAML::Flow << YAML::BeginSeq << float_text((*value)[0]) << float_text((*value)[1]) << YAML::EndSeq;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          out << YAML::Flow << YAML::BeginSeq;
          for (const std::string& item : *value) out << YAML::DoubleQuoted << item;
          out << YAML::EndSeq;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          if (value->size() == 1) {
            out << value->front();
          } else {
            out << YAML::Flow << YAML::BeginSeq;
            for (int64_t item : *value) out << item;
            out << YAML::EndSeq;
          }
        } else {
          out << YAML::Flow << YAML::BeginMap;
          for (const auto& [pattern, mult] : *value)
            out << YAML::Key << YAML::DoubleQuoted << pattern << YAML::Value << float_text(mult);
          out << YAML::EndMap;
        }
      },
      field);
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (std::filesystem::is_directory(path))
    throw ConfigError("config: '" + path + "' is a directory, expected a YAML file");
  std::ifstream in(path);
  if (!in) throw ConfigError("config: cannot read '" + path + "': " + (std::filesystem::exists(path) ? "not readable" : "no such file"));
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node root = parse_text(text.str(), path);
  return build(&root, path, overrides, true);
}

Config parse_config(const std::string& yaml, const std::string& source, const std::vector<std::string>& overrides) {
  YAML::Node root = parse_text(yaml, source);
  return build(&root, source, overrides, false);
}

std::string to_yaml(const Config& config) {
  Config copy = config;  // the schema hands out mutable field pointers
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // the section components currently open
  for (const KeySpec& spec : schema()) {
    std::vector<std::string> parts = split_key(spec.key);
    const std::string leaf = parts.back();
    parts.pop_back();
    size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) ++common;
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (size_t i = common; i < parts.size(); ++i) {
      out << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
      open.push_back(parts[i]);
    }
    out << YAML::Key << leaf << YAML::Value;
    emit_value(out, spec.field(copy), spec.nullable);
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> resume_incompatible_keys(const Config& saved, const Config& now) {
  Config a = saved, b = now;
  std::vector<std::string> keys;
  for (const KeySpec& spec : schema()) {
    const std::string key = spec.key;
    const bool may_change = key.rfind("train.", 0) == 0 && key != "train.batch_size" && key != "train.grad_accum" &&
                            key != "train.seed";
    if (may_change) continue;
    FieldPtr fb = spec.field(b);
    const bool same = std::visit([&](auto* va) { return *va == *std::get<decltype(va)>(fb); }, spec.field(a));
    if (!same) keys.push_back(key);
  }
  return keys;
}

std::vector<std::string> layer_mixers(const ModelConfig& model) {
  const std::vector<std::string> pattern = split_pattern(model.layers);
  LAT_CHECK(!pattern.empty(), "layer_mixers: model.layers: expected mixer names, got '" << model.layers << "'");
  std::vector<std::string> mixers;
  for (int64_t i = 0; i < model.n_layers; ++i) mixers.push_back(pattern[i % pattern.size()]);
  return mixers;
}

}  // namespace lat
