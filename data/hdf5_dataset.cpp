// Checks of an HDF5 dataset's header before its data are read (hdf5_dataset.h).
#include "data/hdf5_dataset.h"

#include <limits>

#include "autograd/host_allocation_limit.h"
#include "data/hdf5_errors.h"

namespace lat {
namespace {

/// "[2, 3]" for HDF5 dimensions, which may exceed what an int64 holds.
std::string dims_str(const hsize_t* dims, int rank) {
  std::string text = "[";
  for (int i = 0; i < rank; ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

/// The element count of `dims`, or an error naming the shape when a dimension or the product
/// does not fit an int64.
int64_t checked_count(const hsize_t* dims, int rank, const std::string& what) {
  constexpr auto kMax = static_cast<hsize_t>(std::numeric_limits<int64_t>::max());
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] > kMax || __builtin_mul_overflow(count, static_cast<int64_t>(dims[i]), &count))
      throw Error(what + ": shape " + dims_str(dims, rank) + " has more elements than an int64 can count");
  }
  return count;
}

/// Refuses storage that is not in this file: external raw files and virtual datasets would make
/// HDF5 open other paths (which may be FIFOs, devices or missing).
void check_storage_in_file(hid_t dcpl, H5D_layout_t layout, const std::string& what) {
  if (layout == H5D_VIRTUAL)
    throw Error(what + ": a virtual dataset (data in other files); expected its data in this file");
  const int external = H5Pget_external_count(dcpl);
  if (external < 0) throw Error(what + ": cannot read its storage properties" + hdf5_detail());
  if (external > 0)
    throw Error(what + ": data in " + std::to_string(external) + " external file(s); expected its data in this file");
}

/// For count > 0: storage allocated, and for a chunked layout every chunk the shape needs.
void check_written(hid_t dataset, hid_t dcpl, H5D_layout_t layout, const hsize_t* dims, int rank,
                   const std::string& what) {
  H5D_space_status_t status;
  check_hdf5(H5Dget_space_status(dataset, &status), "cannot read the storage status of " + what);
  if (status == H5D_SPACE_STATUS_NOT_ALLOCATED)
    throw Error(what + ": never written (no storage allocated; HDF5 would return fill values)");
  if (layout != H5D_CHUNKED) {
    if (status != H5D_SPACE_STATUS_ALLOCATED) throw Error(what + ": only partly written");
    return;
  }
  hsize_t chunk[kMaxDatasetRank];
  if (H5Pget_chunk(dcpl, kMaxDatasetRank, chunk) != rank)
    throw Error(what + ": cannot read its chunk shape" + hdf5_detail());
  // At most count chunks (each holds >= 1 element), so the product cannot overflow.
  hsize_t needed = 1;
  for (int i = 0; i < rank; ++i) {
    if (chunk[i] == 0) throw Error(what + ": chunk shape " + dims_str(chunk, rank) + " has a zero dimension");
    needed *= (dims[i] + chunk[i] - 1) / chunk[i];
  }
  Hdf5Handle space(H5Dget_space(dataset), H5Sclose, "cannot read the dataspace of " + what);
  hsize_t written = 0;
  check_hdf5(H5Dget_num_chunks(dataset, space, &written), "cannot count the chunks of " + what);
  if (written < needed)
    throw Error(what + ": only " + std::to_string(written) + " of the " + std::to_string(needed) + " chunks of shape " +
                dims_str(dims, rank) + " were written (the rest would read as fill values)");
}

/// The filters of a chunked dataset, refusing any but deflate, shuffle and fletcher32 by name.
/// Returns whether there are any (then stored chunks may be smaller than their data).
bool check_filters(hid_t dcpl, const std::string& what) {
  const int count = H5Pget_nfilters(dcpl);
  if (count < 0) throw Error(what + ": cannot read its filters" + hdf5_detail());
  for (int i = 0; i < count; ++i) {
    unsigned flags = 0, filter_config = 0;
    size_t n_values = 0;  // the filter's parameters are not needed, only its identity
    char name[64] = {};
    const H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &n_values, nullptr, sizeof name,
                                           name, &filter_config);
    if (id < 0) throw Error(what + ": cannot read its filter " + std::to_string(i) + hdf5_detail());
    if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE && id != H5Z_FILTER_FLETCHER32)
      throw Error(what + ": stored with the HDF5 filter '" + (name[0] ? name : "unnamed") + "' (id " +
                  std::to_string(id) + "); lat reads deflate (gzip), shuffle and fletcher32 only");
  }
  return count > 0;
}

/// Every chunk of a chunked dataset lies inside the file, the chunks together take at most the
/// file, and none expands past `max_ratio` times its stored size: a hostile header cannot make
/// HDF5 read outside the file or inflate a small file into a huge buffer.
void check_chunks_in_file(hid_t dataset, hid_t dcpl, const hsize_t* dims, int rank, size_t element_bytes,
                          uint64_t file_bytes, uint64_t max_ratio, const std::string& what) {
  hsize_t chunk[kMaxDatasetRank];
  if (H5Pget_chunk(dcpl, kMaxDatasetRank, chunk) != rank)
    throw Error(what + ": cannot read its chunk shape" + hdf5_detail());
  // HDF5 limits a chunk to 4 GiB, and each dimension is at least 1 (checked in check_written).
  uint64_t chunk_bytes = element_bytes;
  for (int i = 0; i < rank; ++i)
    if (__builtin_mul_overflow(chunk_bytes, chunk[i], &chunk_bytes))
      throw Error(what + ": chunk shape " + dims_str(chunk, rank) + " has more bytes than 2^64");
  Hdf5Handle space(H5Dget_space(dataset), H5Sclose, "cannot read the dataspace of " + what);
  hsize_t offset[kMaxDatasetRank] = {};
  uint64_t stored_total = 0;
  while (true) {
    unsigned filter_mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t stored = 0;
    check_hdf5(H5Dget_chunk_info_by_coord(dataset, offset, &filter_mask, &address, &stored),
               "cannot read the chunk at " + dims_str(offset, rank) + " of " + what);
    if (address == HADDR_UNDEF)
      throw Error(what + ": the chunk at " + dims_str(offset, rank) + " was never written (it would read as fill values)");
    if (address > file_bytes || stored > file_bytes - address)
      throw Error(what + ": the chunk at " + dims_str(offset, rank) + " claims bytes " + std::to_string(address) +
                  " to " + std::to_string(address + stored) + ", outside the file (" + std::to_string(file_bytes) +
                  " bytes)");
    stored_total += stored;
    if (stored_total > file_bytes)
      throw Error(what + ": its chunks claim more bytes than the whole file holds (" + std::to_string(file_bytes) +
                  " bytes)");
    if (chunk_bytes / max_ratio > stored)
      throw Error(what + ": the chunk at " + dims_str(offset, rank) + " expands from " + std::to_string(stored) +
                  " stored bytes to " + std::to_string(chunk_bytes) + ", more than " + std::to_string(max_ratio) +
                  "x (" + (max_ratio == 1 ? "an unfiltered chunk is stored whole" : "deflate's largest ratio") + ")");
    // The next chunk in row-major order; done when every dimension has wrapped.
    int i = rank - 1;
    for (; i >= 0; --i) {
      offset[i] += chunk[i];
      if (offset[i] < dims[i]) break;
      offset[i] = 0;
    }
    if (i < 0) break;
  }
}

}  // namespace

DatasetExtent checked_dataset_extent(hid_t dataset, uint64_t file_bytes, const std::string& what) {
  Hdf5Handle space(H5Dget_space(dataset), H5Sclose, "cannot read the dataspace of " + what);
  const H5S_class_t space_class = H5Sget_simple_extent_type(space);
  if (space_class == H5S_NULL) throw Error(what + ": a null dataspace (no elements); expected an array or a scalar");
  if (space_class != H5S_SIMPLE && space_class != H5S_SCALAR)
    throw Error(what + ": cannot read its dataspace" + hdf5_detail());
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) throw Error(what + ": cannot read its rank" + hdf5_detail());
  if (rank > kMaxDatasetRank)
    throw Error(what + ": expected at most " + std::to_string(kMaxDatasetRank) + " dimensions, found " +
                std::to_string(rank));
  hsize_t dims[kMaxDatasetRank] = {};
  if (rank > 0 && H5Sget_simple_extent_dims(space, dims, nullptr) != rank)
    throw Error(what + ": cannot read its shape" + hdf5_detail());
  DatasetExtent extent;
  extent.count = checked_count(dims, rank, what);
  extent.dims.assign(dims, dims + rank);

  Hdf5Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of " + what);
  const size_t element_bytes = H5Tget_size(type);
  if (element_bytes == 0) throw Error(what + ": cannot read its element size" + hdf5_detail());
  Hdf5Handle dcpl(H5Dget_create_plist(dataset), H5Pclose, "cannot read the storage properties of " + what);
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout < 0) throw Error(what + ": cannot read its storage layout" + hdf5_detail());
  const bool filtered = layout == H5D_CHUNKED && check_filters(dcpl, what);
  const uint64_t max_ratio = filtered ? kMaxDeflateRatio : 1;

  uint64_t bytes = 0;
  const bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(extent.count), element_bytes, &bytes);
  if (overflow || bytes / max_ratio > file_bytes)
    throw Error(what + ": shape " + dims_str(dims, rank) + " of " + std::to_string(element_bytes) +
                "-byte elements needs " + (overflow ? std::string("over 2^64") : std::to_string(bytes)) +
                " bytes, more than " + (filtered ? std::to_string(max_ratio) + " times what " : std::string()) +
                "the whole file holds (" + std::to_string(file_bytes) + " bytes; " +
                (filtered ? "deflate expands at most that much" : "its data are unfiltered") + ")");
  if (filtered && bytes > host_physical_memory())
    throw Error(what + ": shape " + dims_str(dims, rank) + " decompresses to " + std::to_string(bytes) +
                " bytes, more than this machine's memory (" + std::to_string(host_physical_memory()) + " bytes)");

  check_storage_in_file(dcpl, layout, what);
  if (extent.count > 0) {
    check_written(dataset, dcpl, layout, dims, rank, what);
    if (layout == H5D_CHUNKED)
      check_chunks_in_file(dataset, dcpl, dims, rank, element_bytes, file_bytes, max_ratio, what);
  }
  return extent;
}

}  // namespace lat
