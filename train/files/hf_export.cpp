// Writing a Hugging Face directory (hf_export.h).
#include "train/files/hf_export.h"

#include <filesystem>

#include "train/files/atomic_file.h"
#include "train/files/hf_config.h"
#include "train/files/hf_tokenizer.h"
#include "train/files/hf_weights.h"
#include "train/files/tokenizer_files.h"

namespace fs = std::filesystem;

namespace lat {

void write_hf_export(const ModelWeights& w, int64_t vocab_size, SafetensorsDType dtype, const std::string& out_dir,
                     std::vector<std::string>& written) {
  using namespace hf_layout;
  const ModelConfig& m = w.config.model;
  const fs::path dir(out_dir);
  auto write_json = [&](const char* name, const nlohmann::ordered_json& j) {
    const std::string path = (dir / name).string();
    write_text_atomically(path, j.dump(2) + "\n", "export");
    written.push_back(path);
  };
  const NamedTensors tensors = hf_tensors_from_lat(m, vocab_size, w.checkpoint.model, w.path);
  const std::string weights_path = (dir / kWeightsFile).string();
  // "format": "pt" is what transformers expects of a safetensors checkpoint.
  save_safetensors(weights_path, tensors, dtype, {{"format", "pt"}});
  written.push_back(weights_path);
  write_json(kConfigFile, hf_config_json(m, vocab_size, dtype));
  write_json(kGenerationConfigFile, {{"_from_model_config", true}, {"use_cache", true}});
  const std::optional<Tokenizer> tokenizer = checkpoint_tokenizer(w.checkpoint);
  if (tokenizer && tokenizer->subword_model() != nullptr) {
    written.push_back(write_subword_tokenizer_file(*tokenizer->subword_model(), out_dir, "export"));
    write_json(kTokenizerConfigFile, hf_subword_tokenizer_config_json(*tokenizer->subword_model()));
    return;
  }
  // Stale tokenizer files from an earlier export would describe another model.
  std::error_code ec;
  fs::remove(dir / export_layout::kSentencePieceFile, ec);
  if (tokenizer) {
    write_json(kTokenizerFile, hf_tokenizer_json(*tokenizer));
    write_json(kTokenizerConfigFile, hf_tokenizer_config_json());
  } else {
    fs::remove(dir / kTokenizerFile, ec);
    fs::remove(dir / kTokenizerConfigFile, ec);
  }
}

}  // namespace lat
