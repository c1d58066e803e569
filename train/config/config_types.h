// The run configuration's types: DESIGN.md "Config (YAML)", one struct field per schema key
// with the schema's default, and the queries on a resolved config. Loading, validating and
// writing a config is config.h.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "data/documents.h"
#include "data/synthetic_tasks.h"
#include "lat/error.h"

namespace lat {

/// A configuration error (bad key, type or value). The CLI maps it to exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// model.attn.*: the softmax-attention layers.
struct AttnConfig {
  int64_t window_size = 0;    // 0 = full causal attention
  int64_t n_kv_heads = 0;     // resolved to model.attn.n_heads when not given (0 before resolution)
  double rope_theta = 10000.0;
  int64_t n_heads = 0;        // resolved to model.n_heads when not given
  int64_t head_dim = 0;       // resolved to model.head_dim when not given
  bool output_gate = false;   // o_proj(attn * sigmoid(gate)), the gate from q_proj's second half per head
  bool qk_norm = false;       // RMSNorm over head_dim of q and k before RoPE
  double rope_fraction = 1.0; // RoPE on the first rope_fraction of head_dim
  bool operator==(const AttnConfig&) const = default;
};

/// model.linear.*: the linear-attention layers.
struct LinearConfig {
  std::string feature_map = "elu1";  // linear_attn only: elu1, relu, identity
  bool normalize = false;             // linear_attn only: Katharopoulos' normalizer
  bool use_short_conv = true;
  int64_t conv_size = 4;
  bool use_gate = true;
  int64_t chunk_size = 64;
  int64_t n_v_heads = 0;  // gdn, delta_net: value heads; resolved to model.n_heads when not given
  bool operator==(const LinearConfig&) const = default;
};

/// model.mamba.*: the Mamba-2 layers (layers/mamba2_layer.h).
struct MambaConfig {
  int64_t d_state = 128;
  int64_t head_dim = 64;
  int64_t expand = 2;    // d_inner = expand * d_model
  int64_t n_groups = 1;  // groups of B and C, a divisor of the head count d_inner / head_dim
  int64_t conv_size = 4;
  int64_t chunk_size = 64;
  bool conv_bias = true;
  bool proj_bias = false;
  std::array<double, 2> time_step_limit = {0.0, std::numeric_limits<double>::infinity()};  // clamp of dt
  double dt_min = 0.001;  // the range dt_bias is initialized from
  double dt_max = 0.1;
  bool operator==(const MambaConfig&) const = default;
};

/// model.mla.*: the multi-head latent attention layers (layers/mla_attention.h); their head
/// count is model.attn.n_heads, their window model.attn.window_size.
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0 = a plain q_proj
  int64_t kv_lora_rank = 64;
  int64_t qk_nope_head_dim = 32;
  int64_t qk_rope_head_dim = 16;
  int64_t v_head_dim = 32;
  bool rope = false;  // RoPE on the shared key part and q's matching channels (Kimi Linear: none)
  bool operator==(const MlaConfig&) const = default;
};

/// model.*: the HybridLM shape.
struct ModelConfig {
  int64_t vocab_size = 0;  // 0 = from the tokenizer
  int64_t d_model = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t head_dim = 0;    // resolved to d_model / n_heads when not given (0 before resolution)
  std::string layers = "gdn,gdn,gdn,attn";  // mixer pattern, repeated to n_layers
  double expand_v = 1.0;
  double mlp_ratio = 4.0;
  int64_t intermediate_size = 0;  // SwiGLU hidden width; 0 = from mlp_ratio
  double norm_eps = 1e-6;
  bool norm_zero_centered = false;  // RMSNorm scales by 1 + weight (Qwen3.5's layout)
  bool tie_embeddings = false;
  AttnConfig attn;
  LinearConfig linear;
  MambaConfig mamba;
  MlaConfig mla;
  bool operator==(const ModelConfig&) const = default;
};

/// data.*: the corpus and how it is cut into windows, or a synthetic task.
struct DataConfig {
  std::string path;               // required unless task is set; relative to the working directory
  std::string format = "auto";    // auto, text, bin, h5
  std::string tokenizer = "char"; // char, byte or a tokenizer file's path (text only)
  std::string bin_dtype = "uint16";
  std::string h5_dataset = "tokens";
  int64_t block_size = 256;
  double val_fraction = 0.1;
  DocSeparator doc_separator;     // none, a string (text) or a token id (bin, h5) that ends each document
  bool packing = false;           // cut windows into documents at doc_separator (cu_seqlens)
  std::string task = "none";      // none, mqar, copy: sequences generated from train.seed instead of path
  MqarOptions mqar;
  CopyOptions copy;
  bool operator==(const DataConfig&) const = default;
};

/// train.*: optimization, logging, checkpoints.
struct TrainConfig {
  std::string precision = "fp32";   // fp32, bf16 (mixed: bf16 product inputs, fp32 elsewhere)
  int64_t batch_size = 12;
  int64_t grad_accum = 1;
  int64_t max_steps = 2000;
  int64_t stop_at = 0;
  std::string optimizer = "adamw";  // adamw, sgd
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup = 100;
  std::string schedule = "cosine";  // cosine, linear, constant
  std::array<double, 2> betas = {0.9, 0.99};
  double eps = 1e-8;
  double weight_decay = 0.1;
  double momentum = 0.9;
  double grad_clip = 1.0;
  int64_t eval_every = 250;
  int64_t eval_batches = 20;
  int64_t log_every = 10;
  int64_t ckpt_every = 500;
  int64_t keep_last = 3;
  std::string out_dir;              // resolved to runs/<config file name> when not given
  std::string resume = "auto";      // auto, never, or a checkpoint path
  int64_t seed = 1337;
  std::string device = "cpu";       // cpu, cuda, cuda:N
  int64_t threads = 0;
  bool operator==(const TrainConfig&) const = default;
};

/// The whole resolved configuration.
struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  std::string init_from;            // empty = not fine-tuning
  bool init_from_strict = true;
  std::vector<std::string> freeze;  // glob patterns of parameter names
  std::vector<std::pair<std::string, double>> lr_mult;  // (glob, multiplier), file order
  bool operator==(const Config&) const = default;
};

/// The comma-separated mixer names of model.layers, trimmed; empty entries are kept (the
/// validator reports them).
std::vector<std::string> mixer_pattern(const std::string& layers);

/// The mixer names of model.layers expanded to n_layers entries, e.g. "gdn,attn" with
/// n_layers 3 gives {gdn, attn, gdn}.
std::vector<std::string> layer_mixers(const ModelConfig& model);

/// The value head dim V = head_dim * expand_v of the linear mixers (a whole number once the
/// config is validated).
int64_t value_head_dim(const ModelConfig& model);

}  // namespace lat
