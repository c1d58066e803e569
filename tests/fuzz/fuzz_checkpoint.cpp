// Fuzzes the HDF5 checkpoint reader: the input is written to a file and read by
// load_checkpoint (root attributes, config, tokenizer, model and optimizer tensors, rng, data
// state). lat::Error is the expected answer to a bad file; anything else escaping, a crash, a
// sanitizer report, a hang, a huge allocation or an HDF5 object left open is a finding.
#include <cstddef>
#include <cstdint>

#include "lat/error.h"
#include "tests/fuzz/fuzz_files.h"
#include "train/files/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path = lat::fuzz::scratch_dir() / "ckpt_00000001.h5";
  lat::fuzz::write_file(path, data, size);
  try {
    lat::load_checkpoint(path.string());
  } catch (const lat::Error&) {
  }
  lat::fuzz::expect_no_open_hdf5_objects("load_checkpoint");
  return 0;
}
