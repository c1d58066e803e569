// Fuzzes the reader of exported models as `lat generate --checkpoint DIR` runs it:
// load_model_weights on a directory holding model.safetensors, config.json and tokenizer.json
// (safetensors header and data, lat_config parsed and validated, tokenizer, __metadata__).
//
// One input holds the three files, in that order, each as a 4-byte little-endian length L and
// then L bytes (fewer when the input ends first). A file whose length field is missing is
// absent from the directory. make_corpus.sh packs the seeds this way.
//
// lat::Error is the expected answer to bad files; anything else escaping, a crash, a sanitizer
// report, a hang or a huge allocation is a finding.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "lat/error.h"
#include "tests/fuzz/fuzz_files.h"
#include "train/files/model_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path dir = lat::fuzz::scratch_dir() / "export";
  std::filesystem::create_directories(dir);
  const std::array<const char*, 3> files = {"model.safetensors", "config.json", "tokenizer.json"};
  size_t at = 0;
  for (const char* name : files) {
    const std::filesystem::path path = dir / name;
    if (size - at < 4) {
      std::filesystem::remove(path);
      at = size;
      continue;
    }
    const uint32_t length = uint32_t{data[at]} | uint32_t{data[at + 1]} << 8 | uint32_t{data[at + 2]} << 16 |
                            uint32_t{data[at + 3]} << 24;
    at += 4;
    const size_t take = length < size - at ? length : size - at;
    lat::fuzz::write_file(path, data + at, take);
    at += take;
  }
  try {
    lat::load_model_weights(dir.string());
  } catch (const lat::Error&) {
  }
  lat::fuzz::expect_no_open_hdf5_objects("load_model_weights");
  return 0;
}
