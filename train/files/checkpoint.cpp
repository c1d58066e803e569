// HDF5 checkpoint writer and reader (layout in checkpoint.h). Every HDF5 call is checked;
// HDF5's own error printing is silenced and its innermost message goes into lat::Error.
#include "train/files/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <hdf5.h>

#include "data/hdf5_dataset.h"
#include "data/hdf5_errors.h"
#include "data/hdf5_links.h"
#include "data/regular_file.h"
#include "data/tokenizer.h"
#include "lat/version.h"
#include "train/files/checksum.h"
#include "train/files/json_file.h"
#include "train/files/tokenizer_files.h"

namespace lat {
namespace {

constexpr const char* kFormat = "lat-checkpoint";
/// The attribute of each dataset holding the crc32_hex of its data (since version 2).
constexpr const char* kCrc32 = "crc32";
/// The first layout version whose datasets carry kCrc32.
constexpr int64_t kFirstChecksummedVersion = 2;

// At exit HDF5 closes whatever is still open (H5_term_library). A file whose write failed
// (disk full, file size limit) stays open inside HDF5 after its H5Fclose fails too, and that
// second close at exit crashed the process (SIGSEGV) after lat had reported the error. lat
// closes every file it opens itself, so it skips HDF5's exit pass; this must run before any
// other HDF5 call, hence a static initializer.
const bool kHdf5ExitPassSkipped = [] { return H5dont_atexit() >= 0; }();

// ---- HDF5 plumbing ------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& message) { throw Error(message); }

/// The variable-length UTF-8 string type.
Hdf5Handle vlen_string_type() {
  Hdf5Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create a string type");
  check_hdf5(H5Tset_size(type, H5T_VARIABLE), "cannot size the string type");
  check_hdf5(H5Tset_cset(type, H5T_CSET_UTF8), "cannot set UTF-8 on the string type");
  return type;
}

/// A group that remembers the order its members were created in, so tensors load back in
/// the order they were saved (module order), not sorted by name.
Hdf5Handle create_ordered_group(hid_t parent, const std::string& name) {
  Hdf5Handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "cannot create group properties");
  check_hdf5(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
             "cannot track creation order");
  return Hdf5Handle(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose,
                    "cannot create group '" + name + "'");
}

// ---- writing ------------------------------------------------------------------------------

void write_attr_i64(hid_t loc, const char* name, int64_t value) {
  Hdf5Handle space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a dataspace");
  Hdf5Handle attr(H5Acreate2(loc, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                  std::string("cannot create attribute '") + name + "'");
  check_hdf5(H5Awrite(attr, H5T_NATIVE_INT64, &value), std::string("cannot write attribute '") + name + "'");
}

void write_attr_f64(hid_t loc, const char* name, double value) {
  Hdf5Handle space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a dataspace");
  Hdf5Handle attr(H5Acreate2(loc, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                  std::string("cannot create attribute '") + name + "'");
  check_hdf5(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value), std::string("cannot write attribute '") + name + "'");
}

void write_attr_strings(hid_t loc, const char* name, const std::vector<std::string>& values, bool scalar) {
  Hdf5Handle type = vlen_string_type();
  hsize_t n = values.size();
  Hdf5Handle space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose,
                   "cannot create a dataspace");
  Hdf5Handle attr(H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                  std::string("cannot create attribute '") + name + "'");
  std::vector<const char*> pointers;
  for (const std::string& value : values) pointers.push_back(value.c_str());
  if (!pointers.empty())  // an empty list (no frozen parameters) is a zero-length attribute
    check_hdf5(H5Awrite(attr, type, pointers.data()), std::string("cannot write attribute '") + name + "'");
}

void write_attr_string(hid_t loc, const char* name, const std::string& value) {
  write_attr_strings(loc, name, {value}, true);
}

/// The checksum attribute of a dataset: 8 hex digits as a fixed-length string, so it is stored
/// in the dataset's object header, which the file format's metadata checksum covers.
void write_attr_crc32(hid_t dataset, uint32_t crc, const std::string& what) {
  const std::string hex = crc32_hex(crc);
  Hdf5Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create a string type");
  check_hdf5(H5Tset_size(type, hex.size()), "cannot size the string type");
  check_hdf5(H5Tset_strpad(type, H5T_STR_NULLPAD), "cannot set the padding of the string type");
  Hdf5Handle space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a dataspace");
  Hdf5Handle attr(H5Acreate2(dataset, kCrc32, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                  "cannot create the checksum of " + what);
  check_hdf5(H5Awrite(attr, type, hex.data()), "cannot write the checksum of " + what);
}

void write_string_dataset(hid_t loc, const std::string& name, const std::string& value) {
  Hdf5Handle type = vlen_string_type();
  Hdf5Handle space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a dataspace");
  Hdf5Handle dataset(H5Dcreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
                     "cannot create dataset '" + name + "'");
  const char* pointer = value.c_str();
  check_hdf5(H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &pointer), "cannot write dataset '" + name + "'");
  // Variable-length strings live in HDF5's global heap, which has no checksum of its own.
  write_attr_crc32(dataset, crc32_of(value.data(), value.size()), "dataset '" + name + "'");
}

/// Bytes that may hold NUL (a SentencePiece .model is binary) as a 1-D uint8 dataset.
void write_bytes_dataset(hid_t loc, const std::string& name, const std::string& bytes) {
  const hsize_t n = bytes.size();
  Hdf5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose, "cannot create a dataspace");
  Hdf5Handle dataset(H5Dcreate2(loc, name.c_str(), H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     H5Dclose, "cannot create dataset '" + name + "'");
  if (n > 0)
    check_hdf5(H5Dwrite(dataset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()),
               "cannot write dataset '" + name + "'");
  write_attr_crc32(dataset, crc32_of(bytes.data(), bytes.size()), "dataset '" + name + "'");
}

/// One f32 dataset in the tensor's shape (a scalar dataspace for shape {}).
void write_tensor(hid_t loc, const std::string& name, const Tensor& tensor, const std::string& what) {
  // Checked here, not up front, so that a failure in the middle of writing is one code path.
  LAT_CHECK(tensor.defined(), what << ": undefined tensor");
  LAT_CHECK(tensor.dtype() == DType::f32, what << ": expected dtype f32, got " << dtype_name(tensor.dtype()));
  const Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  std::vector<hsize_t> dims(host.shape().begin(), host.shape().end());
  Hdf5Handle space(
      dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
      H5Sclose, "cannot create a dataspace");
  Hdf5Handle dataset(H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     H5Dclose, "cannot create dataset for " + what);
  if (host.numel() > 0)
    check_hdf5(H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data<float>()),
               "cannot write " + what);
  write_attr_crc32(dataset, tensor_crc32(host), what);
}

/// Strings are stored as C strings (variable-length HDF5 strings): a NUL would cut them.
void check_no_nul(const std::string& text, const std::string& what) {
  LAT_CHECK(text.find('\0') == std::string::npos, "save_checkpoint: " << what << ": strings may not contain NUL");
}

/// A link name for one tensor: non-empty, no '/', not "." (HDF5 path syntax), unique.
void check_names(const std::vector<std::string>& names, const std::string& what) {
  std::set<std::string> seen;
  for (const std::string& name : names) {
    LAT_CHECK(!name.empty() && name != "." && name.find('/') == std::string::npos,
              "save_checkpoint: " << what << ": invalid name '" << name << "' (empty, '.' or containing '/')");
    LAT_CHECK(seen.insert(name).second, "save_checkpoint: " << what << ": duplicate name '" << name << "'");
  }
}

void write_contents(hid_t file, const Checkpoint& ckpt) {
  write_attr_string(file, "format", kFormat);
  write_attr_i64(file, "version", kCheckpointVersion);
  write_attr_i64(file, "step", ckpt.step);
  write_attr_i64(file, "tokens_seen", ckpt.tokens_seen);
  write_attr_f64(file, "val_loss", ckpt.val_loss);
  write_attr_f64(file, "best_val_loss", ckpt.best_val_loss);
  write_attr_string(file, "lat_version", ckpt.lat_version.empty() ? std::string(version()) : ckpt.lat_version);
  write_attr_string(file, "created", ckpt.created.empty() ? iso8601_now() : ckpt.created);
  write_attr_strings(file, "frozen", ckpt.frozen, false);
  write_attr_i64(file, "world_size", ckpt.world_size);

  write_string_dataset(file, "config", ckpt.config_yaml);

  {
    Hdf5Handle tokenizer(H5Gcreate2(file, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                         "cannot create group 'tokenizer'");
    write_attr_string(tokenizer, "type", ckpt.tokenizer_type);
    if (ckpt.tokenizer_type == "char") write_string_dataset(tokenizer, "vocab", ckpt.tokenizer_vocab);
    if (is_subword_type(ckpt.tokenizer_type)) write_bytes_dataset(tokenizer, "file", ckpt.tokenizer_file);
  }

  {
    Hdf5Handle model = create_ordered_group(file, "model");
    for (const auto& [name, tensor] : ckpt.model) write_tensor(model, name, tensor, "model tensor '" + name + "'");
  }

  if (!ckpt.optimizer.type.empty()) {
    Hdf5Handle optimizer = create_ordered_group(file, "optimizer");
    write_attr_string(optimizer, "type", ckpt.optimizer.type);
    write_attr_i64(optimizer, "step", ckpt.optimizer.step);
    for (const CheckpointParamState& param : ckpt.optimizer.params) {
      Hdf5Handle group = create_ordered_group(optimizer, param.name);
      for (const auto& [buffer, tensor] : param.buffers)
        write_tensor(group, buffer, tensor, "optimizer buffer '" + param.name + "/" + buffer + "'");
    }
  }

  write_string_dataset(file, "rng", ckpt.rng_state);

  {
    Hdf5Handle data(H5Gcreate2(file, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                    "cannot create group 'data'");
    for (const auto& [name, value] : ckpt.data.counters) write_attr_i64(data, name.c_str(), value);
    write_string_dataset(data, "state", ckpt.data.state);
  }
}

/// Makes the file's bytes durable before the rename publishes it.
void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) fail("cannot open '" + path + "' to sync it: " + std::strerror(errno));
  const int status = ::fsync(fd);
  ::close(fd);
  if (status != 0) fail("cannot sync '" + path + "': " + std::strerror(errno));
}

// ---- reading ------------------------------------------------------------------------------

/// The answer of an H5Lexists/H5Aexists call: a failure (metadata that do not read, e.g. a
/// checksum error) is an error, not "absent".
bool exists(htri_t answer, const std::string& what) {
  if (answer < 0) fail("cannot look up " + what + hdf5_detail());
  return answer > 0;
}

/// The path of the group `loc` ("/" for the root, "/model", ...), for messages.
std::string group_path(hid_t loc) {
  const ssize_t size = H5Iget_name(loc, nullptr, 0);
  if (size <= 0) return "/";
  std::string path(static_cast<size_t>(size) + 1, '\0');
  H5Iget_name(loc, path.data(), path.size());
  path.resize(static_cast<size_t>(size));
  return path;
}

/// "<group>/<name>" for the member `name` of the group at `group` ("/" for the root).
std::string member_path(const std::string& group, const std::string& name) {
  return (group == "/" ? "" : group) + "/" + name;
}

/// Whether group `loc` has a link `name`; one that exists must be a hard link (hdf5_links.h),
/// as every link the reader opens passes through here or member_names.
bool has_link(hid_t loc, const char* name) {
  if (!exists(H5Lexists(loc, name, H5P_DEFAULT), std::string("link '") + name + "'")) return false;
  check_hard_link(loc, name, member_path(group_path(loc), name));
  return true;
}

bool has_attr(hid_t loc, const char* name) {
  return exists(H5Aexists(loc, name), std::string("attribute '") + name + "'");
}

/// "inf", "-inf" or "nan" for a value that is not finite.
const char* non_finite_name(float value) { return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf"; }

/// The member names of a group: in creation order when the group tracks it, else by name. Each
/// must be a hard link (hdf5_links.h); `what` is the group's path.
std::vector<std::string> member_names(hid_t group, const std::string& what) {
  Hdf5Handle gcpl(H5Gget_create_plist(group), H5Pclose, "cannot read the properties of " + what);
  unsigned order_flags = 0;
  check_hdf5(H5Pget_link_creation_order(gcpl, &order_flags), "cannot read the link order of " + what);
  const H5_index_t index = (order_flags & H5P_CRT_ORDER_TRACKED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  H5G_info_t info;
  check_hdf5(H5Gget_info(group, &info), "cannot read " + what);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size = H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (size < 0) fail("cannot list " + what + hdf5_detail());
    std::string name(static_cast<size_t>(size) + 1, '\0');
    H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<size_t>(size));
    check_hard_link(group, name.c_str(), member_path(what, name));
    names.push_back(name);
  }
  return names;
}

/// Reads one open checkpoint file. Every count a header claims is checked against the file's
/// size before anything is allocated for it; every tensor is checked for its checksum and for
/// finite values.
class CheckpointReader {
 public:
  CheckpointReader(hid_t file, uint64_t file_bytes) : file_(file), file_bytes_(file_bytes) {}

  Checkpoint read(CheckpointParts parts) {
    Checkpoint ckpt;
    read_root(ckpt);
    if (parts == CheckpointParts::tokenizer_only) return ckpt;
    read_model(ckpt);
    if (parts == CheckpointParts::weights_only) return ckpt;
    if (has_link(file_, "optimizer")) read_optimizer(ckpt.optimizer);
    if (has_link(file_, "rng")) ckpt.rng_state = read_string_dataset(file_, "rng");
    if (has_link(file_, "data")) read_data(ckpt.data);
    return ckpt;
  }

 private:
  void read_root(Checkpoint& ckpt) {
    if (!has_attr(file_, "format")) fail("not a lat checkpoint (no 'format' attribute)");
    const std::string format = read_attr_string(file_, "format", "/");
    if (format != kFormat) fail("not a lat checkpoint (format is '" + format + "', expected '" + kFormat + "')");
    version_ = read_attr_i64(file_, "version", "/");
    if (version_ > kCheckpointVersion)
      fail("checkpoint version " + std::to_string(version_) + " is newer than this lat supports (" +
           std::to_string(kCheckpointVersion) + ")");
    if (version_ < 1) fail("unknown checkpoint version " + std::to_string(version_));

    ckpt.step = read_attr_at_least(file_, "step", "/", 0);
    ckpt.tokens_seen = read_attr_at_least(file_, "tokens_seen", "/", 0);
    ckpt.val_loss = read_attr_f64(file_, "val_loss", "/");
    ckpt.best_val_loss = read_attr_f64(file_, "best_val_loss", "/");
    ckpt.lat_version = read_attr_string(file_, "lat_version", "/");
    ckpt.created = read_attr_string(file_, "created", "/");
    ckpt.frozen = read_attr_strings(file_, "frozen", "/");
    ckpt.world_size = read_attr_at_least(file_, "world_size", "/", 1);
    ckpt.config_yaml = read_string_dataset(file_, "config");

    if (!has_link(file_, "tokenizer")) fail("missing group 'tokenizer'");
    Hdf5Handle tokenizer(H5Gopen2(file_, "tokenizer", H5P_DEFAULT), H5Gclose, "cannot open group 'tokenizer'");
    ckpt.tokenizer_type = read_attr_string(tokenizer, "type", "/tokenizer");
    // Another type would read as "none" (a model of token ids) and its text come out as ids.
    if (ckpt.tokenizer_type != "char" && ckpt.tokenizer_type != "byte" && ckpt.tokenizer_type != "none" &&
        !is_subword_type(ckpt.tokenizer_type))
      fail("/tokenizer attribute 'type': expected char, byte, bpe, sentencepiece or none, got '" +
           excerpt(ckpt.tokenizer_type) + "'");
    if (has_link(tokenizer, "vocab")) ckpt.tokenizer_vocab = read_string_dataset(tokenizer, "vocab");
    if (ckpt.tokenizer_type == "char") {
      try {  // checked here, where the file is known: a repeated character gives two ids one meaning
        Tokenizer::char_from_vocab(ckpt.tokenizer_vocab);
      } catch (const Error& e) {
        fail(std::string("/tokenizer/vocab: ") + e.what());
      }
    }
    if (is_subword_type(ckpt.tokenizer_type)) {
      const uint64_t max_bytes = max_tokenizer_file_bytes(ckpt.tokenizer_type);
      ckpt.tokenizer_file = read_bytes_dataset(tokenizer, "file", "/tokenizer/file", max_bytes);
      try {  // checked here, where the checkpoint is known: its ids mean nothing without it
        subword_tokenizer(ckpt.tokenizer_type, ckpt.tokenizer_file, "/tokenizer/file");
      } catch (const Error& e) {
        fail(e.what());
      }
    }
  }

  void read_model(Checkpoint& ckpt) {
    if (!has_link(file_, "model")) fail("missing group 'model'");
    Hdf5Handle model(H5Gopen2(file_, "model", H5P_DEFAULT), H5Gclose, "cannot open group 'model'");
    for (const std::string& name : member_names(model, "/model"))
      ckpt.model.emplace_back(name, read_tensor(model, name, "/model/" + name));
  }

  void read_optimizer(CheckpointOptimizer& out) {
    Hdf5Handle optimizer(H5Gopen2(file_, "optimizer", H5P_DEFAULT), H5Gclose, "cannot open group 'optimizer'");
    out.type = read_attr_string(optimizer, "type", "/optimizer");
    out.step = read_attr_at_least(optimizer, "step", "/optimizer", 0);
    for (const std::string& name : member_names(optimizer, "/optimizer")) {
      Hdf5Handle group(H5Gopen2(optimizer, name.c_str(), H5P_DEFAULT), H5Gclose, "cannot open /optimizer/" + name);
      CheckpointParamState param{name, {}};
      for (const std::string& buffer : member_names(group, "/optimizer/" + name))
        param.buffers.emplace_back(buffer, read_tensor(group, buffer, "/optimizer/" + name + "/" + buffer));
      out.params.push_back(std::move(param));
    }
  }

  void read_data(DataState& out) {
    Hdf5Handle data(H5Gopen2(file_, "data", H5P_DEFAULT), H5Gclose, "cannot open group 'data'");
    std::vector<std::string> counter_names;
    check_hdf5(H5Aiterate2(
                   data, H5_INDEX_NAME, H5_ITER_INC, nullptr,
                   [](hid_t, const char* name, const H5A_info_t*, void* names) -> herr_t {
                     static_cast<std::vector<std::string>*>(names)->push_back(name);
                     return 0;
                   },
                   &counter_names),
               "cannot list the attributes of /data");
    for (const std::string& name : counter_names)
      out.counters[name] = read_attr_at_least(data, name.c_str(), "/data", 0);
    if (has_link(data, "state")) out.state = read_string_dataset(data, "state");
  }

  /// The strings of an attribute or dataset of string type (variable or fixed length), `count`
  /// of them (checked against the file's size by the caller). `read(memtype, buffer)` performs
  /// the H5Aread/H5Dread.
  template <class Read>
  std::vector<std::string> read_strings(hid_t stored_type, int64_t count, const Read& read, const std::string& what) {
    if (H5Tget_class(stored_type) != H5T_STRING) fail(what + ": expected a string");
    std::vector<std::string> out;
    // The memory type takes the stored character set: HDF5 converts no strings between ASCII
    // and UTF-8, and files written by other tools (h5py, older lat) may use either.
    const H5T_cset_t cset = H5Tget_cset(stored_type);
    if (H5Tis_variable_str(stored_type) > 0) {
      Hdf5Handle type = vlen_string_type();
      check_hdf5(H5Tset_cset(type, cset), "cannot set the character set of a string type");
      if (count == 0) return out;
      std::vector<char*> pointers(static_cast<size_t>(count), nullptr);
      const hsize_t n = static_cast<hsize_t>(count);
      Hdf5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose, "cannot create a dataspace");
      check_hdf5(read(type, pointers.data()), "cannot read " + what);
      for (char* p : pointers) out.emplace_back(p ? p : "");
      check_hdf5(H5Dvlen_reclaim(type, space, H5P_DEFAULT, pointers.data()), "cannot free " + what);
      return out;
    }
    // One byte more per string than stored, and NUL-terminated: HDF5's conversion then keeps
    // every stored character whatever the stored padding (NULLTERM; NULLPAD, as h5py writes;
    // SPACEPAD, whose trailing spaces it drops). A memory type of the stored size would give
    // the last character's byte to the terminator.
    const size_t size = H5Tget_size(stored_type) + 1;
    Hdf5Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create a string type");
    check_hdf5(H5Tset_size(type, size), "cannot size a string type");
    check_hdf5(H5Tset_strpad(type, H5T_STR_NULLTERM), "cannot set the padding of a string type");
    check_hdf5(H5Tset_cset(type, cset), "cannot set the character set of a string type");
    std::vector<char> buffer(size * static_cast<size_t>(count));
    if (count > 0) check_hdf5(read(type, buffer.data()), "cannot read " + what);
    for (int64_t i = 0; i < count; ++i) {
      const char* item = buffer.data() + i * size;
      out.emplace_back(item, strnlen(item, size));
    }
    return out;
  }

  Hdf5Handle open_attr(hid_t loc, const char* name, const std::string& where) {
    if (!has_attr(loc, name)) fail(where + ": missing attribute '" + name + "'");
    return Hdf5Handle(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, std::string("cannot open attribute '") + name + "'");
  }

  /// The element count of an attribute, checked against the file's size.
  int64_t attr_count(hid_t attr, hid_t type, const std::string& what) {
    Hdf5Handle space(H5Aget_space(attr), H5Sclose, "cannot read the dataspace of " + what);
    const hssize_t count = H5Sget_simple_extent_npoints(space);
    const size_t element_bytes = std::max<size_t>(H5Tget_size(type), 1);
    if (count < 0 || static_cast<uint64_t>(count) > file_bytes_ / element_bytes)
      fail(what + ": its header claims " + std::to_string(count) + " elements of " + std::to_string(element_bytes) +
           " bytes, more than the whole file holds (" + std::to_string(file_bytes_) + " bytes)");
    return count;
  }

  std::vector<std::string> read_attr_strings(hid_t loc, const char* name, const std::string& where) {
    Hdf5Handle attr = open_attr(loc, name, where);
    Hdf5Handle type(H5Aget_type(attr), H5Tclose, "cannot read an attribute type");
    const std::string what = std::string("attribute '") + name + "'";
    return read_strings(
        type, attr_count(attr, type, what), [&](hid_t memtype, void* buffer) { return H5Aread(attr, memtype, buffer); },
        what);
  }

  std::string read_attr_string(hid_t loc, const char* name, const std::string& where) {
    std::vector<std::string> values = read_attr_strings(loc, name, where);
    if (values.size() != 1) fail(std::string("attribute '") + name + "': expected one string");
    return values[0];
  }

  /// A numeric scalar attribute of HDF5 class `type_class`, read as T (HDF5 converts).
  template <class T>
  T read_attr_number(hid_t loc, const char* name, hid_t memtype, H5T_class_t type_class, const std::string& where) {
    Hdf5Handle attr = open_attr(loc, name, where);
    Hdf5Handle type(H5Aget_type(attr), H5Tclose, "cannot read an attribute type");
    Hdf5Handle space(H5Aget_space(attr), H5Sclose, "cannot read an attribute dataspace");
    if (H5Tget_class(type) != type_class || H5Sget_simple_extent_npoints(space) != 1)
      fail(std::string("attribute '") + name + "': expected a " +
           (type_class == H5T_INTEGER ? "scalar integer" : "scalar float"));
    T value{};
    check_hdf5(H5Aread(attr, memtype, &value), std::string("cannot read attribute '") + name + "'");
    return value;
  }

  int64_t read_attr_i64(hid_t loc, const char* name, const std::string& where) {
    return read_attr_number<int64_t>(loc, name, H5T_NATIVE_INT64, H5T_INTEGER, where);
  }

  double read_attr_f64(hid_t loc, const char* name, const std::string& where) {
    return read_attr_number<double>(loc, name, H5T_NATIVE_DOUBLE, H5T_FLOAT, where);
  }

  /// A step, count or size: an int64 attribute below `minimum` is damage, never a value to
  /// run with (a negative step would resume before the start, world_size 0 divides by zero).
  int64_t read_attr_at_least(hid_t loc, const char* name, const std::string& where, int64_t minimum) {
    const int64_t value = read_attr_i64(loc, name, where);
    if (value < minimum)
      fail((where == "/" ? std::string("root") : where) + " attribute '" + name +
           "': expected >= " + std::to_string(minimum) + ", found " + std::to_string(value));
    return value;
  }

  std::string read_string_dataset(hid_t loc, const std::string& name) {
    if (!has_link(loc, name.c_str())) fail("missing dataset '" + name + "'");
    const std::string what = "dataset '" + name + "'";
    Hdf5Handle dataset(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open " + what);
    Hdf5Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of " + what);
    const int64_t count = checked_dataset_extent(dataset, file_bytes_, what).count;
    std::vector<std::string> values = read_strings(
        type, count,
        [&](hid_t memtype, void* buffer) { return H5Dread(dataset, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer); },
        what);
    if (values.size() != 1) fail(what + ": expected one string");
    verify_checksum(dataset, crc32_of(values[0].data(), values[0].size()), what);
    return values[0];
  }

  /// A 1-D uint8 dataset of at most `max_bytes` bytes (checked on its header, before anything
  /// is allocated), its checksum verified.
  std::string read_bytes_dataset(hid_t loc, const char* name, const std::string& what, uint64_t max_bytes) {
    if (!has_link(loc, name)) fail(what + ": missing dataset");
    Hdf5Handle dataset(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose, "cannot open " + what);
    Hdf5Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of " + what);
    if (H5Tget_class(type) != H5T_INTEGER || H5Tget_size(type) != 1 || H5Tget_sign(type) != H5T_SGN_NONE)
      fail(what + ": expected a uint8 dataset");
    const DatasetExtent extent = checked_dataset_extent(dataset, file_bytes_, what);
    if (extent.dims.size() != 1) fail(what + ": expected a 1-D dataset, got " + std::to_string(extent.dims.size()) + " dimensions");
    if (static_cast<uint64_t>(extent.count) > max_bytes)
      fail(what + ": " + std::to_string(extent.count) + " bytes, more than the " + std::to_string(max_bytes) +
           " lat reads");
    std::string bytes(static_cast<size_t>(extent.count), '\0');
    if (extent.count > 0)
      check_hdf5(H5Dread(dataset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), "cannot read " + what);
    verify_checksum(dataset, crc32_of(bytes.data(), bytes.size()), what);
    return bytes;
  }

  /// A float dataset as an f32 tensor: its header checked before the tensor is allocated,
  /// then its checksum (required from version 2) and its values.
  Tensor read_tensor(hid_t loc, const std::string& name, const std::string& what) {
    Hdf5Handle dataset(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open " + what);
    Hdf5Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of " + what);
    if (H5Tget_class(type) != H5T_FLOAT) fail(what + ": expected a float dataset");
    const DatasetExtent extent = checked_dataset_extent(dataset, file_bytes_, what);
    Tensor tensor = Tensor::empty(extent.dims);
    if (extent.count > 0)
      check_hdf5(H5Dread(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data<float>()),
                 "cannot read " + what);
    verify_checksum(dataset, tensor_crc32(tensor), what);
    check_finite(tensor, what);
    return tensor;
  }

  /// Compares the dataset's crc32 attribute with `actual`, the checksum of what was read.
  void verify_checksum(hid_t dataset, uint32_t actual, const std::string& what) {
    if (has_attr(dataset, kCrc32)) {
      verify_crc32(read_attr_string(dataset, kCrc32, what), actual, what);
    } else if (version_ >= kFirstChecksummedVersion) {
      fail(what + ": missing attribute '" + kCrc32 + "' (a version " + std::to_string(version_) +
           " checkpoint stores a checksum with every dataset)");
    }
  }

  /// A healthy run's weights and optimizer moments are finite: inf or NaN means it diverged,
  /// or the file was damaged where no checksum covers it (a version 1 file).
  static void check_finite(const Tensor& tensor, const std::string& what) {
    const float* values = tensor.data<float>();
    for (int64_t i = 0; i < tensor.numel(); ++i)
      if (!std::isfinite(values[i]))
        fail(what + ": element " + std::to_string(i) + " is " + non_finite_name(values[i]) +
             "; the checkpoint holds a diverged or damaged model");
  }

  hid_t file_;
  uint64_t file_bytes_;
  int64_t version_ = 0;  // the file's layout version, once read_root has read it
};
}  // namespace

std::string iso8601_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  std::vector<std::string> names;
  for (const auto& entry : ckpt.model) names.push_back(entry.first);
  check_names(names, "model");
  names.clear();
  for (const CheckpointParamState& param : ckpt.optimizer.params) {
    names.push_back(param.name);
    std::vector<std::string> buffers;
    for (const auto& entry : param.buffers) buffers.push_back(entry.first);
    check_names(buffers, "optimizer buffers of '" + param.name + "'");
  }
  check_names(names, "optimizer");
  for (const auto& entry : ckpt.data.counters) check_names({entry.first}, "data counters");
  for (const std::string& name : ckpt.frozen) check_no_nul(name, "frozen");
  check_no_nul(ckpt.lat_version, "lat_version");
  check_no_nul(ckpt.created, "created");
  check_no_nul(ckpt.config_yaml, "config_yaml");
  check_no_nul(ckpt.tokenizer_type, "tokenizer_type");
  check_no_nul(ckpt.tokenizer_vocab, "tokenizer_vocab");
  check_no_nul(ckpt.optimizer.type, "optimizer.type");
  check_no_nul(ckpt.rng_state, "rng_state");
  check_no_nul(ckpt.data.state, "data.state");

  const std::string tmp = path + ".tmp";
  SilenceHdf5Errors silence;
  bool created = false;
  try {
    // The newest file format of the installed HDF5 (1.10: superblock v3, version 2 object
    // headers): its metadata carry checksums, so damaged metadata fail to load as a checksum
    // error instead of being read as some other structure. Readers need HDF5 >= 1.10.
    Hdf5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create file access properties");
    check_hdf5(H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "cannot choose the file format");
    Hdf5Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose, "cannot create '" + tmp + "'");
    created = true;
    write_contents(file, ckpt);
    check_hdf5(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush '" + tmp + "'");
    file.close("cannot close '" + tmp + "'");
    fsync_path(tmp, false);
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) fail("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    fsync_path(parent.empty() ? "." : parent.string(), true);
  } catch (const Error& e) {
    if (created) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
    }
    throw Error("save_checkpoint: '" + path + "': " + e.what());
  }
}

Checkpoint load_checkpoint(const std::string& path, CheckpointParts parts) {
  const std::string where = "load_checkpoint: '" + path + "': ";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(where + "no such file");
  if (std::filesystem::is_directory(path, ec))
    throw Error(where + "is a directory (resolve_checkpoint finds a run's latest checkpoint)");
  if (std::optional<std::string> kind = non_regular_file_kind(path))
    throw Error(where + *kind + ", expected a regular file");
  const uintmax_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) throw Error(where + "cannot read its size: " + ec.message());
  SilenceHdf5Errors silence;
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    // llama.cpp's files start with the magic "GGUF": lat writes them (export) but reads none.
    char magic[4] = {};
    std::ifstream in(path, std::ios::binary);
    if (in.read(magic, sizeof magic) && std::string(magic, sizeof magic) == "GGUF")
      throw Error(where + "a GGUF file (llama.cpp's format, which lat exports but does not read): expected a lat "
                          "checkpoint (.h5), an exported model.safetensors, or a run, export or Hugging Face directory");
    throw Error(where + "not an HDF5 file (another format, or truncated)");
  }
  try {
    Hdf5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose,
                    "cannot open as HDF5, the file may be truncated");
    return CheckpointReader(file, file_bytes).read(parts);
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
}

}  // namespace lat
