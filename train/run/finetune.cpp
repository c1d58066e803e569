// Fine-tuning helpers (definitions in finetune.h).
#include "train/run/finetune.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "data/dataset.h"
#include "data/token_files.h"
#include "train/files/tokenizer_files.h"
#include "train/text/format.h"

namespace lat {
namespace {

/// Copies the first `rows` rows of `src` into `dst` (both row-major f32, same trailing shape).
void copy_leading_rows(const Tensor& src, Tensor& dst, int64_t rows) {
  const Tensor host = src.to(Device::cpu());
  Tensor out = dst.to(Device::cpu()).clone();
  const int64_t row = dst.numel() / dst.size(0);
  std::memcpy(out.data<float>(), host.data<float>(), static_cast<size_t>(rows * row) * sizeof(float));
  dst.copy_(out.device() == dst.device() ? out : out.to(dst.device()));
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::vector<std::string> frozen_names(const std::vector<NamedTensor>& params, const std::vector<std::string>& freeze) {
  std::vector<std::string> frozen;
  for (const std::string& pattern : freeze) {
    const bool used = std::any_of(params.begin(), params.end(),
                                  [&](const NamedTensor& p) { return glob_match(pattern, p.first); });
    if (!used)
      throw ConfigError("freeze: pattern '" + pattern + "' matches no parameter (names look like " +
                        (params.empty() ? std::string("-") : params.front().first) + ", layers.0.attn.q_proj.weight)");
  }
  for (const auto& [name, tensor] : params) {
    // An init-capture: clang before 16 cannot capture a structured binding.
    if (std::any_of(freeze.begin(), freeze.end(), [&name = name](const std::string& p) { return glob_match(p, name); }))
      frozen.push_back(name);
  }
  if (!params.empty() && frozen.size() == params.size())
    throw ConfigError("freeze: the patterns freeze every parameter; nothing would train");
  return frozen;
}

std::vector<NamedTensor> freeze_parameters(const std::vector<NamedTensor>& params,
                                           const std::vector<std::string>& frozen) {
  const std::set<std::string> names(frozen.begin(), frozen.end());
  std::vector<NamedTensor> trainable;
  for (const auto& [name, tensor] : params) {
    if (names.count(name) == 0) {
      trainable.emplace_back(name, tensor);
      continue;
    }
    Tensor handle = tensor;
    handle.set_requires_grad(false);
    handle.zero_grad();
  }
  return trainable;
}

std::vector<std::pair<std::string, double>> lr_multipliers(const std::vector<NamedTensor>& trainable,
                                                           const std::vector<std::pair<std::string, double>>& lr_mult) {
  std::map<std::string, double> chosen;
  for (const auto& [pattern, mult] : lr_mult) {
    bool used = false;
    for (const auto& [name, tensor] : trainable)
      if (glob_match(pattern, name)) {
        chosen[name] = mult;  // a later pattern overrides an earlier one
        used = true;
      }
    if (!used) throw ConfigError("lr_mult: pattern '" + pattern + "' matches no trainable parameter");
  }
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, tensor] : trainable)
    if (auto it = chosen.find(name); it != chosen.end()) out.emplace_back(name, it->second);
  return out;
}

std::string InitReport::describe() const {
  std::ostringstream out;
  out << "init_from " << source << ": " << loaded.size() << " parameters loaded";
  for (const std::string& r : resized) out << "\n  resized (leading rows copied): " << r;
  for (const std::string& m : missing) out << "\n  not in the checkpoint (kept as initialized): " << m;
  for (const std::string& u : unexpected) out << "\n  not in the model (ignored): " << u;
  return out.str();
}

InitReport init_from_weights(const Module& model, const ModelWeights& init, bool strict) {
  InitReport report;
  report.source = init.path;
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, tensor] : init.checkpoint.model) by_name[name] = &tensor;

  std::vector<std::string> mismatches;
  std::vector<std::pair<Tensor, const Tensor*>> copies;  // (parameter, source), applied when all checks passed
  for (const auto& [name, param] : model.named_parameters()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      report.missing.push_back(name);
      continue;
    }
    const Tensor& w = *it->second;
    by_name.erase(it);
    if (w.shape() == param.shape()) {
      copies.emplace_back(param, &w);
      report.loaded.push_back(name);
      continue;
    }
    // A Hugging Face file names the tensor its own way: both names, so either can be searched for.
    const std::string in_file = init.tensor_labels.empty() ? "" : " (" + tensor_label(init, name) + " in the file)";
    const std::string change = name + in_file + ": checkpoint " + shape_str(w.shape()) + ", model " +
                               shape_str(param.shape());
    const bool rows_only = !strict && w.dim() == param.dim() && w.dim() >= 1 &&
                           std::equal(w.shape().begin() + 1, w.shape().end(), param.shape().begin() + 1);
    if (rows_only) {
      Tensor handle = param;
      copy_leading_rows(w, handle, std::min(w.size(0), param.size(0)));
      report.resized.push_back(change);
    } else {
      mismatches.push_back(change);
    }
  }
  for (const auto& [name, tensor] : by_name) report.unexpected.push_back(name);

  if (strict && (!mismatches.empty() || !report.missing.empty() || !report.unexpected.empty())) {
    std::vector<std::string> problems = mismatches;
    for (const std::string& m : report.missing) problems.push_back(m + ": not in the checkpoint");
    for (const std::string& u : report.unexpected) problems.push_back(u + ": not a parameter of the model");
    throw Error("init_from '" + init.path + "' does not fit the model (" + std::to_string(problems.size()) +
                " problems; init_from_strict: false loads what fits): " + join(problems, "; "));
  }
  // Not strict: other shape changes keep the initialization, like missing parameters.
  for (const std::string& m : mismatches) report.missing.push_back(m + " (shape differs)");
  for (auto& [param, source] : copies) param.copy_(source->device() == param.device() ? *source : source->to(param.device()));
  return report;
}

namespace {

/// finetune_tokenizer for a checkpoint whose tokenizer was read from a file: only a
/// data.tokenizer file with the same bytes keeps every id's meaning.
std::optional<Tokenizer> finetune_subword_tokenizer(const Checkpoint& init, const DataConfig& data, bool strict) {
  const std::string base = "init_from: the checkpoint's tokenizer is " + init.tokenizer_type + " (" +
                           std::to_string(init.tokenizer_file.size()) + " bytes of tokenizer file), data.tokenizer is '" +
                           data.tokenizer + "'";
  const std::string remedy = " (init_from_strict: false starts a new vocabulary)";
  if (data.tokenizer == "char" || data.tokenizer == "byte") {
    if (!strict) return std::nullopt;
    throw ConfigError(base + remedy);
  }
  const std::optional<Tokenizer> named = read_tokenizer_file(data.tokenizer, "data.tokenizer");
  const SubwordModel* model = named ? named->subword_model() : nullptr;
  if (model != nullptr && model->type() == init.tokenizer_type && model->file_contents() == init.tokenizer_file)
    return checkpoint_tokenizer(init);
  if (!strict) return std::nullopt;
  throw ConfigError(base + ", a different tokenizer (" +
                    (model == nullptr ? (named ? named->type() : std::string("none"))
                                      : model->type() + ", " + std::to_string(model->file_contents().size()) + " bytes") +
                    "): its ids would mean other tokens" + remedy);
}

}  // namespace

std::optional<Tokenizer> finetune_tokenizer(const Checkpoint& init, const DataConfig& data, bool strict) {
  if (resolve_format(data.path, data.format) != "text") return std::nullopt;
  if (is_subword_type(init.tokenizer_type)) return finetune_subword_tokenizer(init, data, strict);
  if (init.tokenizer_type != data.tokenizer) {
    if (!strict) return std::nullopt;
    throw ConfigError("init_from: the checkpoint's tokenizer is '" + init.tokenizer_type + "', data.tokenizer is '" +
                      data.tokenizer + "' (init_from_strict: false starts a new vocabulary)");
  }
  if (init.tokenizer_type == "byte") return Tokenizer::byte();

  const Tokenizer base = Tokenizer::char_from_vocab(init.tokenizer_vocab);
  std::set<std::string> known;
  for (int64_t id = 0; id < base.vocab_size(); ++id) known.insert(base.decode_one(id));
  const Tokenizer text = Tokenizer::char_from_text(read_text_file(data.path));
  std::vector<std::string> added;
  for (int64_t id = 0; id < text.vocab_size(); ++id)
    if (known.count(text.decode_one(id)) == 0) added.push_back(text.decode_one(id));
  if (added.empty()) return base;
  if (strict) {
    std::vector<std::string> quoted;
    for (const std::string& c : added) quoted.push_back(c == "\n" ? "'\\n'" : "'" + c + "'");
    throw ConfigError("init_from: " + data.path + " has " + std::to_string(added.size()) +
                      " characters outside the checkpoint's vocabulary: " + join(quoted, ", ") +
                      " (init_from_strict: false extends the vocabulary and the embeddings)");
  }
  return Tokenizer::char_from_vocab(init.tokenizer_vocab + join(added, ""));
}

std::optional<Tokenizer> init_model_tokenizer(const Checkpoint& init, const DataConfig& data, bool strict) {
  if (resolve_format(data.path, data.format) != "text") return std::nullopt;
  if (is_subword_type(init.tokenizer_type)) return checkpoint_tokenizer(init);
  if (init.tokenizer_type != "char" && init.tokenizer_type != "byte")
    throw ConfigError("init_from: the model was trained on token ids and has no tokenizer (type '" +
                      init.tokenizer_type + "'): set data.tokenizer (char, byte or a tokenizer file) to train it on "
                      "text");
  DataConfig named = data;
  named.tokenizer = init.tokenizer_type;  // as if named: a char vocabulary still checks the text's characters
  return finetune_tokenizer(init, named, strict);
}

}  // namespace lat
