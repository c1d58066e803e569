// The checks that relate a key to earlier keys, and the derived defaults, each named in the
// schema row (schema.cpp) after whose own bounds it runs. Internal to train/config/.
#pragma once

namespace lat {

class Validation;

/// model.head_dim: 0 resolves to d_model / n_heads, which must divide.
void resolve_head_dim(Validation& v);
/// model.layers: known mixer names, no empty entry, at most n_layers of them.
void check_layers(Validation& v);
/// model.expand_v: a whole value head dim; an even head_dim for attention (RoPE); head dims
/// within the linear-attention kernels' limit.
void check_head_dims(Validation& v);
/// model.attn.n_kv_heads: 0 resolves to n_heads, which it must divide.
void resolve_kv_heads(Validation& v);
/// train.min_lr: not above train.lr.
void check_min_lr(Validation& v);
/// train.out_dir: unset resolves to runs/<config name>; set to '' is an error.
void resolve_out_dir(Validation& v);
/// train.resume: a path (neither auto nor never) must exist, when paths are checked.
void check_resume_path(Validation& v);
/// train.device: cpu, cuda or cuda:N.
void check_device(Validation& v);
/// init_from: the checkpoint must exist, when paths are checked.
void check_init_from(Validation& v);

}  // namespace lat
