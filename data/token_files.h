// Readers of token-id files: nanoGPT raw .bin, llm.c headered .bin, HDF5 datasets, text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lat {

/// The whole file as bytes. Throws lat::Error naming the path when it is not a regular file
/// (checked before opening: a FIFO would block) or cannot be read.
std::string read_text_file(const std::string& path);

/// Magic number in the first int32 of llm.c's token files (dev/data/data_common.py).
constexpr int32_t kLlmcMagic = 20240520;

/// The 8 bytes an HDF5 file starts with (HDF5 file format specification, "Format Signature").
inline const std::string kHdf5Signature("\x89HDF\r\n\x1a\n", 8);

/// Token ids of a .bin file. llm.c's layout is detected by its magic: a header of 256
/// int32 (magic 20240520, version 1 = uint16 or 2 = uint32 tokens, token count in
/// header[2]) then the tokens; the header's version then decides the width and
/// `bin_dtype` is not used. Otherwise the file is raw little-endian `bin_dtype`
/// ("uint16" or "uint32") as nanoGPT's prepare.py writes. Throws lat::Error naming the
/// path on a missing file, a size that is not a whole number of tokens, a header whose
/// count disagrees with the size, an unknown version or bin_dtype, or an id above
/// INT32_MAX (naming the id and its offset); and, rather than read garbage as tokens, for a
/// file that starts with the HDF5 signature, one whose first 4 KB look like text (printable
/// UTF-8 and whitespace), and a damaged llm.c header: a magic within two bits of llm.c's, or
/// a version and count that describe the file exactly beside a wrong magic.
std::vector<int32_t> read_bin_tokens(const std::string& path, const std::string& bin_dtype);

/// Token ids of the integer dataset `dataset` (rank <= 8, read flat in row-major order)
/// of the HDF5 file `path`. Throws lat::Error naming the path on a missing, non-regular
/// (FIFO, device, directory) or non-HDF5 file, a missing dataset, a non-integer dataset, a
/// header that fails checked_dataset_extent (hdf5_dataset.h: a count that overflows, more
/// data than the file holds, data never or partly written, data in other files), or an id
/// outside [0, INT32_MAX] (naming the id and its offset).
std::vector<int32_t> read_h5_tokens(const std::string& path, const std::string& dataset);

}  // namespace lat
