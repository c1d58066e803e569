// Fuzzes the token-file readers: the input is written to one file and read as a raw uint16
// .bin, a raw uint32 .bin (either as an llm.c headered file when it starts with llm.c's magic)
// and an HDF5 file with a "tokens" dataset. lat::Error is the expected answer to a bad file;
// anything else escaping, a crash, a sanitizer report, a hang, a huge allocation or an HDF5
// object left open is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/token_files.h"
#include "lat/error.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path = lat::fuzz::scratch_dir() / "tokens";
  lat::fuzz::write_file(path, data, size);
  for (const char* bin_dtype : {"uint16", "uint32"}) {
    try {
      lat::read_bin_tokens(path.string(), bin_dtype);
    } catch (const lat::Error&) {
    }
  }
  try {
    lat::read_h5_tokens(path.string(), "tokens");
  } catch (const lat::Error&) {
  }
  lat::fuzz::expect_no_open_hdf5_objects("read_h5_tokens");
  return 0;
}
