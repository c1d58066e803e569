// Fuzzes the YAML config reader as `lat train CONFIG.yaml` runs it: the input is written to a
// file and read by load_config (YAML parse, schema, validation). A ConfigError (or any
// lat::Error) is the expected answer to a bad config; anything else escaping, a crash, a
// sanitizer report, a hang or a huge allocation is a finding.
#include <cstddef>
#include <cstdint>

#include "lat/error.h"
#include "tests/fuzz/fuzz_files.h"
#include "train/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path = lat::fuzz::scratch_dir() / "config.yaml";
  lat::fuzz::write_file(path, data, size);
  try {
    lat::load_config(path.string());
  } catch (const lat::Error&) {
  }
  return 0;
}
