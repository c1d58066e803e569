// Fuzzes the Hugging Face config.json reader as `--checkpoint DIR` runs it on a Qwen3.5 or
// granitemoehybrid directory: the input is written to a file, read by read_json_file, recognised by
// is_hf_config, translated by model_config_from_hf and the lat keys put through the config
// validator (load_hf_model's steps before any weight is read). A lat::Error (ConfigError
// included) is the expected answer to a bad file; anything else escaping, a crash, a sanitizer
// report, a hang or a huge allocation is a finding.
#include <cstddef>
#include <cstdint>

#include "lat/error.h"
#include "tests/fuzz/fuzz_files.h"
#include "train/config/config.h"
#include "train/files/hf_config.h"
#include "train/files/json_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path = lat::fuzz::scratch_dir() / "config.json";
  lat::fuzz::write_file(path, data, size);
  try {
    const nlohmann::json j = lat::read_json_file(path.string(), "the model config");
    lat::is_hf_config(j);
    lat::Config config;
    config.model = lat::model_config_from_hf(j, path.string());
    config.data.path = "none";
    config.train.out_dir = "runs/fuzz";
    lat::parse_config(lat::to_yaml(config), "config.json as lat keys");
  } catch (const lat::Error&) {
  }
  return 0;
}
