// The header of an HDF5 dataset, checked before anything is allocated for its data. Shared by the
// checkpoint reader and the token-file reader: a damaged or hostile header (a shape whose
// element count overflows, more data than the file can hold, data never written, data kept in
// other files) is an error naming the dataset, never an allocation or a read of fill values.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lat {

/// The most dimensions a dataset lat reads may have (tensors have at most 4, token ids 1 or 2).
constexpr int kMaxDatasetRank = 8;

/// The most a filtered (deflate) chunk may expand: deflate's largest ratio is 1032:1
/// (258-byte matches coded in 2 bits each), and shuffle and fletcher32 do not compress.
constexpr uint64_t kMaxDeflateRatio = 1032;

/// A dataset's checked shape.
struct DatasetExtent {
  std::vector<int64_t> dims;  // {} for a scalar
  int64_t count = 1;          // elements: the product of dims (1 for a scalar)
};

/// The extent of `dataset` (a file of `file_bytes` bytes), after checking that: the dataspace
/// is simple or scalar, of rank <= kMaxDatasetRank; every dimension and the element count fit
/// an int64 (overflow-checked products); count x the stored element size is at most
/// `file_bytes` (a dataset whose header claims more than its file can hold is damaged); the
/// data lie in the file itself (no external files, no virtual dataset); and, unless count is
/// 0, every element was written: storage allocated, and for a chunked layout every chunk the
/// shape needs present (a missing one would read as fill values). A chunked dataset may be
/// filtered with deflate (gzip), shuffle and fletcher32 (as h5repack and h5py write them; any
/// other filter is refused by name): its data may then be up to kMaxDeflateRatio x
/// `file_bytes`, and at most this machine's physical memory. Every chunk must lie inside the
/// file, the chunks together take at most `file_bytes`, and none may expand more than
/// kMaxDeflateRatio x (1x unfiltered). Throws lat::Error "<what>: ..." with expected versus
/// found.
DatasetExtent checked_dataset_extent(hid_t dataset, uint64_t file_bytes, const std::string& what);

}  // namespace lat
