// Reading a Hugging Face config.json into lat's model.* keys, shared by the families
// (hf_qwen35.h, hf_granite.h): typed reads that collect every key lat cannot honour so that
// one error names them all, and the keys every family treats as informational.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/config/config_types.h"

namespace lat {

/// The largest max_position_embeddings read (2^30 tokens): lat's context is not bounded by
/// it, but other tools size their position tables from it, so a damaged value is named here.
inline constexpr int64_t kMaxPositionEmbeddings = int64_t{1} << 30;

/// More layers than lat builds (model.n_layers' bound): no pattern that long is spelled out.
inline constexpr int64_t kMaxLayerTypes = 1024;

/// "export --format hf: layer <i> (<kind>): ", the start of an export refusal.
std::string hf_layer_feature(size_t i, const std::string& kind);

/// Reads config.json values from `path`, collecting problems; finish() throws them as one
/// lat::Error "load_model_weights: '<path>': keys lat cannot honour: <problem>; ...".
class HfConfigReader {
 public:
  /// `family_informational`: keys of this family that change nothing lat computes, beside the
  /// keys every transformers config has (architectures, model_type, dtype, token ids, ...).
  HfConfigReader(const nlohmann::json& config, std::string path, std::set<std::string> family_informational = {});

  /// The integer `key` (>= 1); `fallback` when absent, or a problem when there is none.
  int64_t positive_int(const std::string& key, std::optional<int64_t> fallback = std::nullopt);
  /// positive_int, but nullopt (and a problem) when neither the value nor a fallback is usable.
  std::optional<int64_t> read_positive_int(const std::string& key, std::optional<int64_t> fallback = std::nullopt);
  /// The value `v` (named `key`) as a number > 0; `fallback` when null, or with a problem.
  double positive_number(const nlohmann::json& v, const std::string& key, double fallback);
  /// The number `key` > 0; `fallback` when absent or null.
  double positive_number(const std::string& key, double fallback);
  /// The number `key` in (0, `high`]; `fallback` when absent. null is refused: transformers
  /// would fail on it, and no fallback is what the file meant.
  double number_above_zero_up_to(const std::string& key, double high, const std::string& high_text, double fallback);
  /// Checks that `key`, when present, is an integer in [low, high] (`range_text`); its value
  /// is not used.
  void check_int_in(const std::string& key, int64_t low, int64_t high, const std::string& range_text);
  /// The boolean `key`; `fallback` when absent, or with a problem when not a boolean.
  bool boolean(const std::string& key, bool fallback);
  /// `key`, when present, must equal `honoured` (what lat computes); `what` says why.
  void require(const std::string& key, const nlohmann::json& honoured, const std::string& what);
  /// attention_dropout, when present, must be the number 0.
  void require_no_attention_dropout();

  void problem(const std::string& text) { problems_.push_back(text); }
  void use(const std::string& key) { used_.insert(key); }
  const nlohmann::json& value(const std::string& key) const { return config_[key]; }
  bool has(const std::string& key) const { return config_.contains(key); }

  /// Throws one lat::Error naming every problem and every key neither read nor informational
  /// (with the nearest known key: a typo would otherwise read as a missing dimension); keys
  /// starting with one of `ignored_prefixes` are skipped.
  void finish(const std::vector<std::string>& ignored_prefixes = {});

 private:
  const nlohmann::json& config_;
  std::string path_;
  std::set<std::string> informational_;
  std::set<std::string> used_;
  std::vector<std::string> problems_;
};

/// What a family's rope settings may hold beyond rope_type "default" and rope_theta.
struct HfRopeKeys {
  /// partial_rotary_factor's default (attn.rope_fraction); nullopt: the family turns the whole
  /// head and has no such key.
  std::optional<double> partial_rotary_factor;
  /// rope_parameters keys read as plain RoPE (Qwen3.5's mrope_*).
  std::vector<std::string> plain_rope_keys;
};

/// attn.rope_theta (default 10000) and, with keys.partial_rotary_factor, attn.rope_fraction
/// from rope_parameters (transformers 5) or the top-level rope_theta / partial_rotary_factor
/// of older files; rope_scaling must be absent or null, rope_type "default", any other key of
/// rope_parameters is a problem of `r`.
void read_hf_rope(HfConfigReader& r, AttnConfig& attn, const HfRopeKeys& keys);

}  // namespace lat
