// The schema table (schema.h), in DESIGN.md's order.
#include "train/config/schema.h"

#include <algorithm>

#include "train/config/rules.h"

namespace lat {
namespace {

// The key's name and its field: the dotted key is the field's path in Config, written once.
#define LAT_KEY(path) .key = #path, .field = [](Config& c) -> FieldPtr { return &c.path; }

Bounds ints_from(int64_t low) { return {.min_int = low}; }
Bounds floats_above(double low) { return {.range = FloatRange{.low = low, .low_open = true}}; }
Bounds floats_from(double low, const char* note = "") { return {.range = FloatRange{.low = low, .note = note}}; }
/// [low, high)
Bounds floats_from_below(double low, double high) {
  return {.range = FloatRange{.low = low, .high = high, .high_open = true}};
}
/// (low, high)
Bounds floats_between(double low, double high) {
  return {.range = FloatRange{.low = low, .low_open = true, .high = high, .high_open = true}};
}
Bounds one_of(std::vector<std::string> values) { return {.one_of = std::move(values)}; }
Bounds non_empty(const char* message) { return {.if_empty = message}; }

}  // namespace

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> keys = {
      {LAT_KEY(model.vocab_size), .bounds = ints_from(0)},
      {LAT_KEY(model.d_model), .bounds = ints_from(1)},
      {LAT_KEY(model.n_layers), .bounds = ints_from(1)},
      {LAT_KEY(model.n_heads), .bounds = ints_from(1)},
      {LAT_KEY(model.head_dim), .bounds = ints_from(0), .rule = resolve_head_dim},
      {LAT_KEY(model.layers), .rule = check_layers},
      {LAT_KEY(model.expand_v), .bounds = floats_above(0), .rule = check_head_dims},
      {LAT_KEY(model.mlp_ratio), .bounds = floats_above(0)},
      {LAT_KEY(model.norm_eps), .bounds = floats_above(0)},
      {LAT_KEY(model.tie_embeddings)},
      {LAT_KEY(model.attn.window_size), .bounds = ints_from(0)},
      {LAT_KEY(model.attn.n_kv_heads), .bounds = ints_from(0), .rule = resolve_kv_heads},
      {LAT_KEY(model.attn.rope_theta), .bounds = floats_above(0)},
      {LAT_KEY(model.linear.feature_map), .bounds = one_of({"elu1", "relu", "identity"})},
      {LAT_KEY(model.linear.normalize)},
      {LAT_KEY(model.linear.use_short_conv)},
      {LAT_KEY(model.linear.conv_size), .bounds = ints_from(1)},
      {LAT_KEY(model.linear.use_gate)},
      {LAT_KEY(model.linear.chunk_size), .bounds = ints_from(1)},
      {LAT_KEY(data.path), .bounds = non_empty("required: the text or token file to train on"), .nullable = true},
      {LAT_KEY(data.format), .bounds = one_of({"auto", "text", "bin", "h5"})},
      {LAT_KEY(data.tokenizer), .bounds = one_of({"char", "byte"})},
      {LAT_KEY(data.bin_dtype), .bounds = one_of({"uint16", "uint32"})},
      {LAT_KEY(data.h5_dataset), .bounds = non_empty("expected a dataset name, got ''")},
      {LAT_KEY(data.block_size), .bounds = ints_from(1)},
      {LAT_KEY(data.val_fraction), .bounds = floats_between(0, 1)},
      {LAT_KEY(train.batch_size), .bounds = ints_from(1)},
      {LAT_KEY(train.grad_accum), .bounds = ints_from(1)},
      {LAT_KEY(train.max_steps), .bounds = ints_from(1)},
      {LAT_KEY(train.stop_at), .bounds = ints_from(0)},
      {LAT_KEY(train.optimizer), .bounds = one_of({"adamw", "sgd"})},
      {LAT_KEY(train.lr), .bounds = floats_above(0)},
      {LAT_KEY(train.min_lr), .bounds = floats_from(0), .rule = check_min_lr},
      {LAT_KEY(train.warmup), .bounds = ints_from(0)},
      {LAT_KEY(train.schedule), .bounds = one_of({"cosine", "linear", "constant"})},
      {LAT_KEY(train.betas), .bounds = floats_from_below(0, 1)},
      {LAT_KEY(train.eps), .bounds = floats_above(0)},
      {LAT_KEY(train.weight_decay), .bounds = floats_from(0)},
      {LAT_KEY(train.momentum), .bounds = floats_from_below(0, 1)},
      {LAT_KEY(train.grad_clip), .bounds = floats_from(0, " (0 = off)")},
      {LAT_KEY(train.eval_every), .bounds = ints_from(0)},
      {LAT_KEY(train.eval_batches), .bounds = ints_from(1)},
      {LAT_KEY(train.log_every), .bounds = ints_from(1)},
      {LAT_KEY(train.ckpt_every), .bounds = ints_from(0)},
      {LAT_KEY(train.keep_last), .bounds = ints_from(0)},
      {LAT_KEY(train.out_dir), .rule = resolve_out_dir},
      {LAT_KEY(train.resume), .bounds = non_empty("expected auto, never or a checkpoint path, got ''"),
       .rule = check_resume_path},
      {LAT_KEY(train.seed), .bounds = ints_from(0)},
      {LAT_KEY(train.device), .rule = check_device},
      {LAT_KEY(train.threads), .bounds = ints_from(0)},
      {LAT_KEY(init_from), .rule = check_init_from, .nullable = true},
      {LAT_KEY(init_from_strict)},
      {LAT_KEY(freeze), .bounds = non_empty("expected a non-empty pattern")},
      {LAT_KEY(lr_mult), .bounds = {.range = FloatRange{.low = 0}, .if_empty = "expected a non-empty pattern"}},
  };
  return keys;
}

#undef LAT_KEY

const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = {"model", "model.attn", "model.linear", "data", "train"};
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

std::vector<std::string> all_key_names() {
  std::vector<std::string> names;
  for (const KeySpec& spec : schema()) names.push_back(spec.key);
  for (const std::string& section : sections()) names.push_back(section);
  return names;
}

}  // namespace lat
