// The run configuration: DESIGN.md "Config (YAML)". load_config reads a YAML file plus
// `--set key=value` overrides and validates everything (unknown and duplicate keys, types,
// impossible values) before any work starts. Errors name the key and where it was set:
// "file:line" or "--set key". The types are config_types.h; the table of keys with their
// bounds is schema.cpp; loader.h reads YAML into a Config and validate.h checks it.
#pragma once
#include <string>
#include <vector>

#include "train/config/config_types.h"

namespace lat {

/// Reads the YAML file at `path`, applies `overrides` ("key=value", value parsed as YAML,
/// later ones win) and validates the result against the schema. Keys may be nested maps or
/// dotted (`model: {d_model: 64}` or `model.d_model: 64`). Resolves the derived defaults
/// (model.head_dim, model.attn.n_kv_heads, train.out_dir = runs/<file name without extension>).
/// Checks that init_from and a train.resume path exist.
/// Throws ConfigError naming the key and "file:line" or "--set key": unknown key (with a
/// "did you mean" suggestion), duplicate key, wrong type, impossible value, YAML syntax error,
/// missing file or missing data.path.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// Parses and validates a config held in a string (e.g. a checkpoint's /config), naming
/// `source` in errors. Same rules as load_config, except that paths are not checked for
/// existence; train.out_dir defaults to runs/<source without directory and extension>.
Config parse_config(const std::string& yaml, const std::string& source,
                    const std::vector<std::string>& overrides = {});

/// The resolved config as YAML (every key, defaults filled), nested by section. It loads
/// back to an equal Config.
std::string to_yaml(const Config& config);

/// The dotted schema keys whose values differ between `saved` and `now` among those that may
/// not change on resume: every key except train.*, plus train.batch_size, train.grad_accum
/// and train.seed. Empty when resuming is allowed. In schema order.
std::vector<std::string> resume_incompatible_keys(const Config& saved, const Config& now);

/// "key: A (init_from) vs B (this run)" for each model.* key whose value differs between
/// `init` (a model's stored config) and `now`, in schema order; the values as YAML scalars.
std::vector<std::string> model_keys_differing(const Config& init, const Config& now);

}  // namespace lat
