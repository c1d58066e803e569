// Fine-tuning (DESIGN.md config keys init_from, init_from_strict, freeze, lr_mult): starting a
// run from another model's weights, keeping some parameters fixed, and scaling the learning
// rate of others. The trainer calls these when it builds a fresh run; a resumed run gets its
// weights from its own checkpoint instead and only re-applies freeze and lr_mult.
//
// Patterns are shell globs over dotted parameter names ('*' also crosses dots, so
// "layers.0.*" is all of layer 0 and "*.A_log" every A_log; '?' one character; [abc] a class).
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer.h"
#include "layers/module.h"
#include "train/config/config.h"
#include "train/files/model_reader.h"

namespace lat {

/// Whether `name` matches the glob `pattern` (fnmatch without flags).
bool glob_match(const std::string& pattern, const std::string& name);

/// The names of `params` that some pattern of config `freeze` matches, in parameter order.
/// Throws ConfigError naming a pattern that matches no parameter (a typo would otherwise
/// silently train everything) or one that would freeze every parameter.
std::vector<std::string> frozen_names(const std::vector<NamedTensor>& params, const std::vector<std::string>& freeze);

/// Marks the `frozen` parameters as not requiring a gradient (so backward keeps none) and
/// returns the others, in order: the list the optimizer gets (no state for frozen ones).
std::vector<NamedTensor> freeze_parameters(const std::vector<NamedTensor>& params,
                                           const std::vector<std::string>& frozen);

/// (parameter name, multiplier) for every trainable parameter some lr_mult pattern matches;
/// when several match, the last one in the config wins. Throws ConfigError naming a pattern
/// that matches no trainable parameter.
std::vector<std::pair<std::string, double>> lr_multipliers(const std::vector<NamedTensor>& trainable,
                                                           const std::vector<std::pair<std::string, double>>& lr_mult);

/// What init_from did to each parameter.
struct InitReport {
  std::string source;                   // the file read
  std::vector<std::string> loaded;      // copied as they are
  std::vector<std::string> resized;     // "name [old] -> [new]": leading rows copied, the rest as initialized
  std::vector<std::string> missing;     // in the model, not in the checkpoint: as initialized
  std::vector<std::string> unexpected;  // in the checkpoint, not in the model: ignored
  /// One line per parameter that was not simply loaded, for the run's log.
  std::string describe() const;
};

/// Copies `init`'s weights into `model` by name, checking shapes one by one. strict: every
/// parameter must be present with the model's shape and the checkpoint may hold no others;
/// otherwise one lat::Error lists every mismatch ("name: checkpoint [a, b], model [c, d]"),
/// missing and unexpected name, with the source file. Not strict: missing parameters keep
/// their initialization, unexpected ones are ignored, and a parameter whose shape differs
/// only in its first dimension (a resized vocabulary: embeddings, lm_head) gets the common
/// leading rows; other shape changes keep the initialization. All are listed in the report.
InitReport init_from_weights(const Module& model, const ModelWeights& init, bool strict);

/// The tokenizer a fine-tuning run encodes its text with, so that ids keep the meaning they
/// had for `init`: the checkpoint's own (the same type as data.tokenizer). When the text has
/// characters outside a char vocabulary: strict -> ConfigError listing them; not strict ->
/// the vocabulary extended by them, appended after the old ids (so the old rows of the
/// embeddings stay valid). nullopt when the data is not text (token ids are used as they
/// are) or when, not strict, the checkpoint has another tokenizer type or none. Throws
/// ConfigError (strict) for a different tokenizer type; lat::Error when the text cannot be read.
/// A bpe or sentencepiece checkpoint: data.tokenizer must be a file with the same bytes as the
/// checkpoint's tokenizer file (then that tokenizer); char, byte or another file -> ConfigError
/// naming both (strict) or nullopt (not strict).
std::optional<Tokenizer> finetune_tokenizer(const Checkpoint& init, const DataConfig& data, bool strict);

/// finetune_tokenizer when data.tokenizer names init_from itself (its default under init_from):
/// the model's own tokenizer whatever its type (a char vocabulary checked against the text as
/// finetune_tokenizer does); nullopt when the data is not text. Throws ConfigError for a
/// model trained on token ids (no tokenizer to encode text with).
std::optional<Tokenizer> init_model_tokenizer(const Checkpoint& init, const DataConfig& data, bool strict);

}  // namespace lat
