// The schema table (schema.h), in DESIGN.md's order, and the rules its rows name.
#include "train/config/schema.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "data/dataset.h"
#include "data/documents.h"
#include "data/synthetic_tasks.h"
#include "layers/fused/rope.h"
#include "layers/linear_attention/common.h"
#include "layers/mixer.h"
#include "train/config/suggest.h"
#include "train/config/thread_count.h"
#include "train/config/validation.h"
#include "train/text/format.h"

namespace lat {
namespace {

// ---- rules: checks against earlier keys and derived defaults, each run right after the
// bounds of the row that names it -----------------------------------------------------------

/// The key to blame for a head dim: model.head_dim when set, else the d_model it came from.
std::string head_dim_key(const Validation& v) {
  return v.was_set("model.head_dim") ? "model.head_dim" : "model.d_model";
}

/// Whether model.layers has a layer of `kind`.
bool has_mixer(const ModelConfig& m, const std::string& kind) {
  const std::vector<std::string> pattern = mixer_pattern(m.layers);
  return std::find(pattern.begin(), pattern.end(), kind) != pattern.end();
}

/// Refuses model.attn.`key`, set to `value` (other than its default) that `what_it_does` to
/// attn layers, in a model of mla layers and no attn layer: mla layers read model.attn.n_heads,
/// window_size and rope_theta only, so it would be silently unused. Other attention-free models
/// keep it, as the Hugging Face configs they are read from carry it (Qwen3.5's gdn layers sit
/// beside attention keys).
void refuse_attn_only_key_in_mla_model(Validation& v, const std::string& key, const std::string& value,
                                       const std::string& what_it_does) {
  const ModelConfig& m = v.config().model;
  if (!has_mixer(m, "mla") || has_mixer(m, "attn")) return;
  v.fail(key, value + " " + what_it_does + " attn layers only, but model.layers '" + m.layers +
                  "' has none (mla layers use model.mla.*, and of model.attn only n_heads, window_size and "
                  "rope_theta): remove " + key);
}

/// model.head_dim: 0 resolves to d_model / n_heads, which must divide.
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

/// model.layers: known mixer names, no empty entry, at most n_layers of them.
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

/// model.expand_v: a whole value head dim; head dims within the linear-attention kernels' limit.
void check_head_dims(Validation& v) {
  const ModelConfig& m = v.config().model;
  const double value_dim = static_cast<double>(m.head_dim) * m.expand_v;
  if (value_dim < 1 || value_dim != std::round(value_dim))
    v.fail("model.expand_v", "head_dim (" + std::to_string(m.head_dim) + ") * expand_v must be a whole number >= 1");
  const std::vector<std::string> pattern = mixer_pattern(m.layers);
  // mamba2 and mla layers have their own head sizes (model.mamba.*, model.mla.*).
  const bool has_linear = std::any_of(pattern.begin(), pattern.end(), [](const std::string& k) {
    return k != "attn" && k != "mamba2" && k != "mla";
  });
  const int64_t limit = linear_attention::kMaxHeadDim;
  if (has_linear && (m.head_dim > limit || value_dim > static_cast<double>(limit)))
    v.fail(head_dim_key(v), "the linear-attention kernels take head dimensions up to " + std::to_string(limit) +
                                ", got head_dim " + std::to_string(m.head_dim) + " and value dim " +
                                std::to_string(static_cast<int64_t>(value_dim)));
}

/// model.attn.n_heads: 0 resolves to model.n_heads.
void resolve_attn_heads(Validation& v) {
  ModelConfig& m = v.config().model;
  if (m.attn.n_heads == 0) m.attn.n_heads = m.n_heads;
}

/// The key to blame for the attention head count: model.attn.n_heads when set, else model.n_heads.
std::string attn_heads_key(const Validation& v) {
  return v.was_set("model.attn.n_heads") ? "model.attn.n_heads" : "model.n_heads";
}

/// model.attn.head_dim: 0 resolves to model.head_dim; attention layers need it even (RoPE
/// rotates pairs of dimensions). Another size is refused in a model of mla layers and no attn
/// layer (a resolved config repeats model.head_dim, which is accepted).
void resolve_attn_head_dim(Validation& v) {
  ModelConfig& m = v.config().model;
  const bool set = m.attn.head_dim != 0;
  if (!set) m.attn.head_dim = m.head_dim;
  if (m.attn.head_dim != m.head_dim)
    refuse_attn_only_key_in_mla_model(v, "model.attn.head_dim", std::to_string(m.attn.head_dim),
                                      "sizes the heads of");
  const std::vector<std::string> pattern = mixer_pattern(m.layers);
  const bool has_attn = std::find(pattern.begin(), pattern.end(), "attn") != pattern.end();
  if (has_attn && m.attn.head_dim % 2 != 0)
    v.fail(set ? "model.attn.head_dim" : head_dim_key(v),
           "attention layers need an even head_dim (RoPE rotates pairs of dimensions), got head_dim " +
               std::to_string(m.attn.head_dim) +
               (set ? std::string() : " (d_model / n_heads unless model.head_dim or model.attn.head_dim is set)"));
}

/// model.attn.n_kv_heads: 0 resolves to model.attn.n_heads, which it must divide. Only attn
/// layers group their key/value heads: in a model of mla layers and no attn layer another
/// count would read as mla's (which expands every head's key and value from its latent) and
/// is refused. Other attention-free models keep it as Hugging Face configs carry it (a
/// resolved config repeats the count it resolved to, which is accepted).
void resolve_kv_heads(Validation& v) {
  ModelConfig& m = v.config().model;
  if (m.attn.n_kv_heads == 0) m.attn.n_kv_heads = m.attn.n_heads;
  const std::vector<std::string> pattern = mixer_pattern(m.layers);
  const bool has_attn = std::find(pattern.begin(), pattern.end(), "attn") != pattern.end();
  const bool has_mla_layer = std::find(pattern.begin(), pattern.end(), "mla") != pattern.end();
  if (has_mla_layer && !has_attn && m.attn.n_kv_heads != m.attn.n_heads)
    v.fail("model.attn.n_kv_heads",
           std::to_string(m.attn.n_kv_heads) + " key/value heads group the heads of attn layers only, but model.layers '" +
               m.layers +
               "' has none (an mla layer expands every head's key and value from its latent, "
               "model.mla.kv_lora_rank): remove model.attn.n_kv_heads");
  if (m.attn.n_heads % m.attn.n_kv_heads != 0)
    v.fail("model.attn.n_kv_heads", attn_heads_key(v) + " (" + std::to_string(m.attn.n_heads) +
                                        ") is not a multiple of model.attn.n_kv_heads (" +
                                        std::to_string(m.attn.n_kv_heads) + ")");
}

/// model.attn.output_gate: true is refused in a model of mla layers and no attn layer.
void check_output_gate(Validation& v) {
  if (v.config().model.attn.output_gate)
    refuse_attn_only_key_in_mla_model(v, "model.attn.output_gate", "true", "gates the output of");
}

/// model.attn.qk_norm: true is refused in a model of mla layers and no attn layer.
void check_qk_norm(Validation& v) {
  if (v.config().model.attn.qk_norm)
    refuse_attn_only_key_in_mla_model(v, "model.attn.qk_norm", "true", "normalizes q and k in");
}

/// model.attn.rope_fraction: the rotated part of a head, floor(head_dim * rope_fraction) as
/// transformers' partial_rotary_factor, must be a positive even width; other than 1, it is
/// refused in a model of mla layers and no attn layer.
void check_rope_fraction(Validation& v) {
  const ModelConfig& m = v.config().model;
  if (m.attn.rope_fraction != 1.0)
    refuse_attn_only_key_in_mla_model(v, "model.attn.rope_fraction", format_significant(m.attn.rope_fraction),
                                      "rotates part of the heads of");
  if (!has_mixer(m, "attn")) return;
  const int64_t rotary_dim = rotary_dim_of(m.attn.head_dim, m.attn.rope_fraction);
  if (rotary_dim < 2 || rotary_dim % 2 != 0)
    v.fail("model.attn.rope_fraction", "rotates floor(head_dim " + std::to_string(m.attn.head_dim) + " * " +
                                           format_significant(m.attn.rope_fraction) + ") = " + std::to_string(rotary_dim) +
                                           " dimensions; RoPE needs a positive even number");
}

/// model.linear.n_v_heads: 0 resolves to model.n_heads; a multiple of it, and only for mixers
/// that have value heads of their own (gdn, delta_net).
void resolve_v_heads(Validation& v) {
  ModelConfig& m = v.config().model;
  if (m.linear.n_v_heads == 0) m.linear.n_v_heads = m.n_heads;
  if (m.linear.n_v_heads % m.n_heads != 0)
    v.fail("model.linear.n_v_heads", "expected a multiple of model.n_heads (" + std::to_string(m.n_heads) +
                                         "), got " + std::to_string(m.linear.n_v_heads));
  if (m.linear.n_v_heads == m.n_heads) return;
  for (const std::string& kind : mixer_pattern(m.layers))
    if (kind != "attn" && kind != "mla" && kind != "gdn" && kind != "delta_net")
      v.fail("model.linear.n_v_heads", "value heads apart from the key heads exist in gdn and delta_net layers only, "
                                       "but model.layers has '" + kind + "'");
}

/// data.path: required unless data.task generates the sequences (data.task's rule rejects
/// both; an unknown task is its bounds' error).
void require_data_path(Validation& v) {
  const DataConfig& d = v.config().data;
  if (d.path.empty() && d.task == "none") v.fail("data.path", "required: the text or token file to train on");
}

/// data.tokenizer: char, byte, or the path of a tokenizer file or a directory holding one,
/// which must exist when paths are checked (run start reads it and names this key when it is
/// not a tokenizer lat reads). Unset under init_from it resolves to init_from itself: a
/// fine-tuning run encodes its text with the model's own tokenizer unless told otherwise.
void check_tokenizer(Validation& v) {
  std::string& tokenizer = v.config().data.tokenizer;
  if (!v.was_set("data.tokenizer") && !v.config().init_from.empty()) {
    tokenizer = v.config().init_from;
    return;  // init_from's own rule names it when it does not exist
  }
  if (tokenizer.empty())
    v.fail("data.tokenizer", "expected char, byte or the path of a tokenizer.json, a SentencePiece .model or a "
                             "directory holding one, got ''");
  std::error_code ec;
  if (tokenizer == "char" || tokenizer == "byte" || !v.check_paths() || std::filesystem::exists(tokenizer, ec)) return;
  v.fail("data.tokenizer", "no such file or directory: '" + tokenizer + "'" + did_you_mean(tokenizer, {"char", "byte"}) +
                               " (expected char, byte or the path of a tokenizer.json, a SentencePiece .model or a "
                               "directory holding one)");
}

/// data.doc_separator: the kind the data's format takes (a string for text, a token id for bin
/// and h5) when the format is known without reading the file (data.format, or the extension
/// of data.path); load_data checks a format found from the file's content.
void check_doc_separator(Validation& v) {
  const DataConfig& d = v.config().data;
  const std::string format = d.format != "auto" ? d.format : format_by_extension(d.path);
  const std::string problem = doc_separator_mismatch(d.doc_separator, format);
  if (!problem.empty()) v.fail("data.doc_separator", problem);
}

/// data.packing: documents need the separator that ends them, and a separator does nothing
/// without packing (a config that sets it expects documents: say so rather than ignore it).
void check_packing(Validation& v) {
  const DataConfig& d = v.config().data;
  const bool has_separator = !std::holds_alternative<std::monostate>(d.doc_separator);
  if (d.packing && !has_separator)
    v.fail("data.packing", "needs data.doc_separator, the string (text) or token id (bin, h5) that ends each document");
  if (has_separator && !d.packing)
    v.fail("data.doc_separator", "splits documents only with data.packing: true: set it, or remove data.doc_separator");
}

/// data.task: a synthetic task excludes data.path and data.packing (it generates its own
/// sequences, one per row).
void check_task_source(Validation& v) {
  const DataConfig& d = v.config().data;
  if (d.task != "none" && !d.path.empty())
    v.fail("data.task", d.task + " generates its own sequences, but data.path is set too ('" + d.path + "', " +
                            v.where("data.path") + "): remove one of them");
  if (d.task != "none" && d.packing)
    v.fail("data.packing", "packs the documents of data.path, but data.task " + d.task + " (" + v.where("data.task") +
                               ") generates its own sequences, one per row: remove one of them");
}

/// data.mqar.pairs: with data.task mqar, each count fits data.block_size and data.mqar.vocab.
void check_mqar_pairs_fit(Validation& v) {
  const DataConfig& d = v.config().data;
  if (d.task != "mqar") return;
  const int64_t most = mqar_max_pairs(d.mqar.vocab, d.block_size);
  for (int64_t pairs : d.mqar.pairs)
    if (pairs > most)
      v.fail("data.mqar.pairs", std::to_string(pairs) + " pairs do not fit: at most " + std::to_string(most) +
                                    " with data.block_size " + std::to_string(d.block_size) + " and data.mqar.vocab " +
                                    std::to_string(d.mqar.vocab) + " (4 * pairs <= block_size, pairs < vocab / 2)");
}

/// data.copy.length: with data.task copy, the string and its copy fit data.block_size.
void check_copy_length_fits(Validation& v) {
  const DataConfig& d = v.config().data;
  if (d.task != "copy" || d.copy.length <= copy_max_length(d.block_size)) return;
  v.fail("data.copy.length", "a string of " + std::to_string(d.copy.length) + " tokens does not fit: at most " +
                                 std::to_string(copy_max_length(d.block_size)) + " with data.block_size " +
                                 std::to_string(d.block_size) +
                                 " (string, separator and copy: 2 * length <= block_size)");
}

/// model.vocab_size: when set with a synthetic task, it holds the task's ids.
void check_task_vocab(Validation& v) {
  const Config& c = v.config();
  if (c.data.task == "none" || c.model.vocab_size == 0) return;
  const int64_t task_vocab = c.data.task == "mqar" ? c.data.mqar.vocab : kCopyVocab;
  if (c.model.vocab_size < task_vocab)
    v.fail("model.vocab_size", std::to_string(c.model.vocab_size) + " is below the " + std::to_string(task_vocab) +
                                   " ids of data.task " + c.data.task + " (0 = the task's vocabulary)");
}

/// data.copy.length, the last of the task's keys: the copy fits, and model.vocab_size holds
/// the task's ids.
void check_copy_and_task_vocab(Validation& v) {
  check_copy_length_fits(v);
  check_task_vocab(v);
}

/// train.min_lr: not above train.lr.
void check_min_lr(Validation& v) {
  const TrainConfig& t = v.config().train;
  if (t.min_lr <= t.lr) return;
  std::ostringstream os;
  os << "min_lr (" << t.min_lr << ") is above train.lr (" << t.lr << ")";
  v.fail(v.was_set("train.min_lr") ? "train.min_lr" : "train.lr", os.str());
}

/// train.out_dir: unset resolves to runs/<config name>; set to '' is an error.
void resolve_out_dir(Validation& v) {
  std::string& out_dir = v.config().train.out_dir;
  if (!out_dir.empty()) return;
  if (v.was_set("train.out_dir")) v.fail("train.out_dir", "expected a directory, got ''");
  out_dir = "runs/" + v.config_name();
}

/// train.resume: a path (neither auto nor never) must exist, when paths are checked.
void check_resume_path(Validation& v) {
  const std::string& resume = v.config().train.resume;
  if (v.check_paths() && resume != "auto" && resume != "never" && !std::filesystem::exists(resume))
    v.fail("train.resume", "expected auto, never or an existing checkpoint path, got '" + resume + "'" +
                               did_you_mean(resume, {"auto", "never"}));
}

/// train.device: cpu, cuda or cuda:N.
void check_device(Validation& v) {
  const std::string& device = v.config().train.device;
  bool ok = device == "cpu" || device == "cuda";
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5)
    ok = std::all_of(device.begin() + 5, device.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!ok) v.fail("train.device", "unknown device '" + device + "' (expected cpu, cuda or cuda:N)");
}

/// init_from: the checkpoint must exist, when paths are checked.
void check_init_from(Validation& v) {
  const std::string& init_from = v.config().init_from;
  if (v.check_paths() && !init_from.empty() && !std::filesystem::exists(init_from))
    v.fail("init_from", "no such checkpoint: '" + init_from + "'");
}

/// Whether model.layers has a mamba2 layer (the model.mamba.* checks apply only then).
bool has_mamba2(const ModelConfig& m) {
  const std::vector<std::string> pattern = mixer_pattern(m.layers);
  return std::find(pattern.begin(), pattern.end(), "mamba2") != pattern.end();
}

/// model.mamba.head_dim divides d_inner = expand * d_model (the heads are whole).
void check_mamba_head_dim(Validation& v) {
  const ModelConfig& m = v.config().model;
  const int64_t d_inner = m.mamba.expand * m.d_model;
  if (has_mamba2(m) && d_inner % m.mamba.head_dim != 0)
    v.fail("model.mamba.head_dim", "expected a divisor of model.mamba.expand * model.d_model = " +
                                       std::to_string(d_inner) + ", got " + std::to_string(m.mamba.head_dim));
}

/// model.mamba.n_groups divides the head count d_inner / head_dim (each group serves whole heads).
void check_mamba_groups(Validation& v) {
  const ModelConfig& m = v.config().model;
  const int64_t heads = m.mamba.expand * m.d_model / m.mamba.head_dim;
  if (has_mamba2(m) && heads % m.mamba.n_groups != 0)
    v.fail("model.mamba.n_groups", "expected a divisor of the mamba head count " + std::to_string(heads) +
                                       " (expand * d_model / head_dim), got " + std::to_string(m.mamba.n_groups));
}

/// model.mamba.time_step_limit: [lo, hi] with lo < hi (hi may be .inf).
void check_time_step_limit(Validation& v) {
  const auto [lo, hi] = v.config().model.mamba.time_step_limit;
  if (!(lo < hi))
    v.fail("model.mamba.time_step_limit", "expected [lo, hi] with lo < hi, got [" + format_significant(lo) + ", " +
                                              format_significant(hi) + "]");
}

/// model.mamba.dt_max: at least dt_min.
void check_dt_range(Validation& v) {
  const MambaConfig& mamba = v.config().model.mamba;
  if (mamba.dt_min > mamba.dt_max)
    v.fail("model.mamba.dt_max", "expected at least model.mamba.dt_min (" + format_significant(mamba.dt_min) +
                                     "), got " + format_significant(mamba.dt_max));
}

/// Whether model.layers has an mla layer (the model.mla.* checks apply only then).
bool has_mla(const ModelConfig& m) {
  const std::vector<std::string> pattern = mixer_pattern(m.layers);
  return std::find(pattern.begin(), pattern.end(), "mla") != pattern.end();
}

/// model.mla.qk_rope_head_dim: with qk_nope_head_dim, a query/key head of at least one channel.
void check_mla_qk_dims(Validation& v) {
  const MlaConfig& mla = v.config().model.mla;
  if (has_mla(v.config().model) && mla.qk_nope_head_dim + mla.qk_rope_head_dim < 1)
    v.fail("model.mla.qk_rope_head_dim", "model.mla.qk_nope_head_dim + qk_rope_head_dim is the query/key head size, "
                                         "expected at least 1, got 0 + 0");
}

/// model.mla.rope: RoPE rotates pairs, so the shared key part is even and not empty.
void check_mla_rope(Validation& v) {
  const MlaConfig& mla = v.config().model.mla;
  if (has_mla(v.config().model) && mla.rope && (mla.qk_rope_head_dim < 2 || mla.qk_rope_head_dim % 2 != 0))
    v.fail("model.mla.rope", "rotates model.mla.qk_rope_head_dim channels, expected an even number >= 2 (RoPE "
                             "rotates pairs), got " + std::to_string(mla.qk_rope_head_dim));
}

// ---- bounds -------------------------------------------------------------------------------

// Upper bounds of the sizes: far above any model or run lat is meant for, and low enough that
// a damaged value (a config stored in a checkpoint or an export) cannot ask for terabytes of
// memory or 10^5 threads before the weights are compared with it.
constexpr int64_t kMaxWidth = int64_t{1} << 16;  // model.d_model
constexpr int64_t kMaxCount = 1024;              // layers, heads, head dims, chunk
constexpr double kMaxMlpRatio = 64.0;
constexpr double kMaxExpandV = 64.0;
constexpr int64_t kMaxExpand = 64;         // model.mamba.expand
constexpr double kMaxTimeStep = 1e3;       // model.mamba.dt_min, dt_max: softplus^-1 stays finite
// Upper bounds of the other floats: far above any setting that trains, and low enough that a
// mistyped exponent (1e300) is an error naming the key instead of an inf or nan mid-run.
constexpr double kMaxRopeTheta = 1e12;
constexpr double kMaxMqarAlpha = 10.0;     // (gap + 1)^(alpha - 1) stays finite up to kMaxBlockSize
constexpr double kMaxLearningRate = 10.0;  // train.lr, min_lr
constexpr double kMaxWeightDecay = 10.0;
constexpr double kMaxLrMultiplier = 100.0;  // lr_mult
constexpr int64_t kMaxConvSize = 64;
constexpr int64_t kMaxBatchSize = int64_t{1} << 16;  // sequences per micro-batch

// The key's name and its field: the dotted key is the field's path in Config, written once.
#define LAT_KEY(path) .key = #path, .field = [](Config& c) -> FieldPtr { return &c.path; }

Bounds ints_from(int64_t low) { return {.min_int = low}; }
/// [low, high]
Bounds ints_in(int64_t low, int64_t high) { return {.min_int = low, .max_int = high}; }
/// (low, high]
Bounds floats_above_up_to(double low, double high) {
  return {.range = FloatRange{.low = low, .low_open = true, .high = high}};
}
Bounds floats_from(double low, const char* note = "") { return {.range = FloatRange{.low = low, .note = note}}; }
/// [low, high]
Bounds floats_in(double low, double high) { return {.range = FloatRange{.low = low, .high = high}}; }
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
      {LAT_KEY(model.vocab_size), .bounds = ints_in(0, kMaxVocabSize)},
      {LAT_KEY(model.d_model), .bounds = ints_in(1, kMaxWidth)},
      {LAT_KEY(model.n_layers), .bounds = ints_in(1, kMaxCount)},
      {LAT_KEY(model.n_heads), .bounds = ints_in(1, kMaxCount)},
      {LAT_KEY(model.head_dim), .bounds = ints_in(0, kMaxCount), .rule = resolve_head_dim},
      {LAT_KEY(model.layers), .rule = check_layers},
      {LAT_KEY(model.expand_v), .bounds = floats_above_up_to(0, kMaxExpandV), .rule = check_head_dims},
      {LAT_KEY(model.mlp_ratio), .bounds = floats_above_up_to(0, kMaxMlpRatio)},
      {LAT_KEY(model.intermediate_size), .bounds = ints_in(0, kMaxWidth * 64)},
      {LAT_KEY(model.norm_eps), .bounds = floats_above_up_to(0, kMaxNormEps)},
      {LAT_KEY(model.norm_zero_centered)},
      {LAT_KEY(model.tie_embeddings)},
      {LAT_KEY(model.attn.window_size), .bounds = ints_from(0)},
      {LAT_KEY(model.attn.n_heads), .bounds = ints_in(0, kMaxCount), .rule = resolve_attn_heads},
      {LAT_KEY(model.attn.head_dim), .bounds = ints_in(0, kMaxCount), .rule = resolve_attn_head_dim},
      {LAT_KEY(model.attn.n_kv_heads), .bounds = ints_in(0, kMaxCount), .rule = resolve_kv_heads},
      {LAT_KEY(model.attn.rope_theta), .bounds = floats_above_up_to(0, kMaxRopeTheta)},
      {LAT_KEY(model.attn.output_gate), .rule = check_output_gate},
      {LAT_KEY(model.attn.qk_norm), .rule = check_qk_norm},
      {LAT_KEY(model.attn.rope_fraction), .bounds = floats_above_up_to(0, 1), .rule = check_rope_fraction},
      {LAT_KEY(model.linear.feature_map), .bounds = one_of({"elu1", "relu", "identity"})},
      {LAT_KEY(model.linear.normalize)},
      {LAT_KEY(model.linear.use_short_conv)},
      {LAT_KEY(model.linear.conv_size), .bounds = ints_in(1, kMaxConvSize)},
      {LAT_KEY(model.linear.use_gate)},
      {LAT_KEY(model.linear.chunk_size), .bounds = ints_in(1, kMaxCount)},
      {LAT_KEY(model.linear.n_v_heads), .bounds = ints_in(0, kMaxCount), .rule = resolve_v_heads},
      {LAT_KEY(model.mamba.d_state), .bounds = ints_in(1, linear_attention::kMaxHeadDim)},
      {LAT_KEY(model.mamba.head_dim), .bounds = ints_in(1, linear_attention::kMaxHeadDim)},
      {LAT_KEY(model.mamba.expand), .bounds = ints_in(1, kMaxExpand), .rule = check_mamba_head_dim},
      {LAT_KEY(model.mamba.n_groups), .bounds = ints_in(1, kMaxCount), .rule = check_mamba_groups},
      {LAT_KEY(model.mamba.conv_size), .bounds = ints_in(1, kMaxConvSize)},
      {LAT_KEY(model.mamba.chunk_size), .bounds = ints_in(1, kMaxCount)},
      {LAT_KEY(model.mamba.conv_bias)},
      {LAT_KEY(model.mamba.proj_bias)},
      {LAT_KEY(model.mamba.time_step_limit), .bounds = floats_from(0), .rule = check_time_step_limit},
      {LAT_KEY(model.mamba.dt_min), .bounds = floats_above_up_to(0, kMaxTimeStep)},
      {LAT_KEY(model.mamba.dt_max), .bounds = floats_above_up_to(0, kMaxTimeStep), .rule = check_dt_range},
      {LAT_KEY(model.mla.q_lora_rank), .bounds = ints_in(0, kMaxCount)},
      {LAT_KEY(model.mla.kv_lora_rank), .bounds = ints_in(1, kMaxCount)},
      {LAT_KEY(model.mla.qk_nope_head_dim), .bounds = ints_in(0, kMaxCount)},
      {LAT_KEY(model.mla.qk_rope_head_dim), .bounds = ints_in(0, kMaxCount), .rule = check_mla_qk_dims},
      {LAT_KEY(model.mla.v_head_dim), .bounds = ints_in(1, kMaxCount)},
      {LAT_KEY(model.mla.rope), .rule = check_mla_rope},
      {LAT_KEY(data.path), .rule = require_data_path, .nullable = true},
      {LAT_KEY(data.format), .bounds = one_of({"auto", "text", "bin", "h5"})},
      {LAT_KEY(data.tokenizer), .rule = check_tokenizer},
      {LAT_KEY(data.bin_dtype), .bounds = one_of({"uint16", "uint32"})},
      {LAT_KEY(data.h5_dataset), .bounds = non_empty("expected a dataset name, got ''")},
      {LAT_KEY(data.block_size), .bounds = ints_in(1, kMaxBlockSize)},
      {LAT_KEY(data.val_fraction), .bounds = floats_between(0, 1)},
      {LAT_KEY(data.doc_separator), .rule = check_doc_separator},
      {LAT_KEY(data.packing), .rule = check_packing},
      {LAT_KEY(data.task), .bounds = one_of({"none", "mqar", "copy"}), .rule = check_task_source},
      {LAT_KEY(data.mqar.vocab), .bounds = ints_in(4, kMaxVocabSize)},
      {LAT_KEY(data.mqar.pairs), .bounds = ints_from(1), .rule = check_mqar_pairs_fit},
      {LAT_KEY(data.mqar.alpha), .bounds = floats_above_up_to(0, kMaxMqarAlpha)},
      {LAT_KEY(data.copy.length), .bounds = ints_from(1), .rule = check_copy_and_task_vocab},
      {LAT_KEY(train.precision), .bounds = one_of({"fp32", "bf16"})},
      {LAT_KEY(train.batch_size), .bounds = ints_in(1, kMaxBatchSize)},
      {LAT_KEY(train.grad_accum), .bounds = ints_from(1)},
      {LAT_KEY(train.max_steps), .bounds = ints_from(1)},
      {LAT_KEY(train.stop_at), .bounds = ints_from(0)},
      {LAT_KEY(train.optimizer), .bounds = one_of({"adamw", "sgd"})},
      {LAT_KEY(train.lr), .bounds = floats_above_up_to(0, kMaxLearningRate)},
      {LAT_KEY(train.min_lr), .bounds = floats_in(0, kMaxLearningRate), .rule = check_min_lr},
      {LAT_KEY(train.warmup), .bounds = ints_from(0)},
      {LAT_KEY(train.schedule), .bounds = one_of({"cosine", "linear", "constant"})},
      {LAT_KEY(train.betas), .bounds = floats_from_below(0, 1)},
      {LAT_KEY(train.eps), .bounds = floats_above_up_to(0, 1)},
      {LAT_KEY(train.weight_decay), .bounds = floats_in(0, kMaxWeightDecay)},
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
      {LAT_KEY(train.threads), .bounds = ints_in(0, kMaxThreads)},
      {LAT_KEY(init_from), .rule = check_init_from, .nullable = true},
      {LAT_KEY(init_from_strict)},
      {LAT_KEY(freeze), .bounds = non_empty("expected a non-empty pattern")},
      {LAT_KEY(lr_mult),
       .bounds = {.range = FloatRange{.low = 0, .high = kMaxLrMultiplier}, .if_empty = "expected a non-empty pattern"}},
  };
  return keys;
}

#undef LAT_KEY

const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = {"model", "model.attn", "model.linear", "model.mamba", "model.mla",
                                                 "data", "data.mqar", "data.copy", "train"};
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
