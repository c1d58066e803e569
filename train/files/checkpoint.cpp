// HDF5 checkpoint writer and reader (layout in checkpoint.h). Every HDF5 call is checked;
// HDF5's own error printing is silenced and its innermost message goes into lat::Error.
#include "train/files/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include <hdf5.h>

#include "data/hdf5_errors.h"
#include "lat/version.h"

namespace lat {
namespace {

constexpr const char* kFormat = "lat-checkpoint";

// At exit HDF5 closes whatever is still open (H5_term_library). A file whose write failed
// (disk full, file size limit) stays open inside HDF5 after its H5Fclose fails too, and that
// second close at exit crashed the process (SIGSEGV) after lat had reported the error. lat
// closes every file it opens itself, so it skips HDF5's exit pass; this must run before any
// other HDF5 call, hence a static initializer.
const bool kHdf5ExitPassSkipped = [] { return H5dont_atexit() >= 0; }();

// ---- HDF5 plumbing ------------------------------------------------------------------------

/// The innermost message on HDF5's error stack, e.g. "truncated file: eof = ...".
std::string hdf5_detail() {
  std::string detail;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        auto* text = static_cast<std::string*>(out);
        if (text->empty() && e->desc) *text = e->desc;
        return 0;
      },
      &detail);
  H5Eclear2(H5E_DEFAULT);
  return detail.empty() ? "" : " (" + detail + ")";
}

[[noreturn]] void fail(const std::string& message) { throw Error(message); }

/// An HDF5 identifier closed by its matching H5*close when it goes out of scope.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id_ < 0) fail(what + hdf5_detail());
  }
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;
  operator hid_t() const { return id_; }
  /// Closes now and reports failure (the destructor cannot).
  void close(const std::string& what) {
    herr_t status = close_(id_);
    id_ = -1;
    if (status < 0) fail(what + hdf5_detail());
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void check(herr_t status, const std::string& what) {
  if (status < 0) fail(what + hdf5_detail());
}

/// The variable-length UTF-8 string type.
Handle vlen_string_type() {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create a string type");
  check(H5Tset_size(type, H5T_VARIABLE), "cannot size the string type");
  check(H5Tset_cset(type, H5T_CSET_UTF8), "cannot set UTF-8 on the string type");
  return type;
}

/// A group that remembers the order its members were created in, so tensors load back in
/// the order they were saved (module order), not sorted by name.
Handle create_ordered_group(hid_t parent, const std::string& name) {
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "cannot create group properties");
  check(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
        "cannot track creation order");
  return Handle(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose,
                "cannot create group '" + name + "'");
}

// ---- writing ------------------------------------------------------------------------------

void write_attr_i64(hid_t loc, const char* name, int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a dataspace");
  Handle attr(H5Acreate2(loc, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              std::string("cannot create attribute '") + name + "'");
  check(H5Awrite(attr, H5T_NATIVE_INT64, &value), std::string("cannot write attribute '") + name + "'");
}

void write_attr_f64(hid_t loc, const char* name, double value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a dataspace");
  Handle attr(H5Acreate2(loc, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              std::string("cannot create attribute '") + name + "'");
  check(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value), std::string("cannot write attribute '") + name + "'");
}

void write_attr_strings(hid_t loc, const char* name, const std::vector<std::string>& values, bool scalar) {
  Handle type = vlen_string_type();
  hsize_t n = values.size();
  Handle space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose,
               "cannot create a dataspace");
  Handle attr(H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              std::string("cannot create attribute '") + name + "'");
  std::vector<const char*> pointers;
  for (const std::string& value : values) pointers.push_back(value.c_str());
  if (!pointers.empty())  // an empty list (no frozen parameters) is a zero-length attribute
    check(H5Awrite(attr, type, pointers.data()), std::string("cannot write attribute '") + name + "'");
}

void write_attr_string(hid_t loc, const char* name, const std::string& value) {
  write_attr_strings(loc, name, {value}, true);
}

void write_string_dataset(hid_t loc, const std::string& name, const std::string& value) {
  Handle type = vlen_string_type();
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a dataspace");
  Handle dataset(H5Dcreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
                 "cannot create dataset '" + name + "'");
  const char* pointer = value.c_str();
  check(H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &pointer), "cannot write dataset '" + name + "'");
}

/// One f32 dataset in the tensor's shape (a scalar dataspace for shape {}).
void write_tensor(hid_t loc, const std::string& name, const Tensor& tensor, const std::string& what) {
  // Checked here, not up front, so that a failure in the middle of writing is one code path.
  LAT_CHECK(tensor.defined(), what << ": undefined tensor");
  LAT_CHECK(tensor.dtype() == DType::f32, what << ": expected dtype f32, got " << dtype_name(tensor.dtype()));
  const Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  std::vector<hsize_t> dims(host.shape().begin(), host.shape().end());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose, "cannot create a dataspace");
  Handle dataset(H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose, "cannot create dataset for " + what);
  if (host.numel() > 0)
    check(H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data<float>()),
          "cannot write " + what);
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
    Handle tokenizer(H5Gcreate2(file, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                     "cannot create group 'tokenizer'");
    write_attr_string(tokenizer, "type", ckpt.tokenizer_type);
    if (ckpt.tokenizer_type == "char") write_string_dataset(tokenizer, "vocab", ckpt.tokenizer_vocab);
  }

  {
    Handle model = create_ordered_group(file, "model");
    for (const auto& [name, tensor] : ckpt.model) write_tensor(model, name, tensor, "model tensor '" + name + "'");
  }

  if (!ckpt.optimizer.type.empty()) {
    Handle optimizer = create_ordered_group(file, "optimizer");
    write_attr_string(optimizer, "type", ckpt.optimizer.type);
    write_attr_i64(optimizer, "step", ckpt.optimizer.step);
    for (const CheckpointParamState& param : ckpt.optimizer.params) {
      Handle group = create_ordered_group(optimizer, param.name);
      for (const auto& [buffer, tensor] : param.buffers)
        write_tensor(group, buffer, tensor, "optimizer buffer '" + param.name + "/" + buffer + "'");
    }
  }

  write_string_dataset(file, "rng", ckpt.rng_state);

  {
    Handle data(H5Gcreate2(file, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
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

bool has_link(hid_t loc, const char* name) { return H5Lexists(loc, name, H5P_DEFAULT) > 0; }

/// The strings of an attribute or dataset of string type (variable or fixed length).
/// `read(memtype, buffer)` performs the H5Aread/H5Dread.
template <class Read>
std::vector<std::string> read_strings(hid_t stored_type, hid_t space, const Read& read, const std::string& what) {
  if (H5Tget_class(stored_type) != H5T_STRING) fail(what + ": expected a string");
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) fail(what + ": cannot read its size" + hdf5_detail());
  std::vector<std::string> out;
  // The memory type takes the stored character set: HDF5 converts no strings between ASCII
  // and UTF-8, and files written by other tools (h5py, older lat) may use either.
  const H5T_cset_t cset = H5Tget_cset(stored_type);
  if (H5Tis_variable_str(stored_type) > 0) {
    Handle type = vlen_string_type();
    check(H5Tset_cset(type, cset), "cannot set the character set of a string type");
    std::vector<char*> pointers(static_cast<size_t>(n), nullptr);
    if (n > 0) check(read(type, pointers.data()), "cannot read " + what);
    for (char* p : pointers) out.emplace_back(p ? p : "");
    if (n > 0) check(H5Dvlen_reclaim(type, space, H5P_DEFAULT, pointers.data()), "cannot free " + what);
  } else {
    const size_t size = H5Tget_size(stored_type);
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create a string type");
    check(H5Tset_size(type, size), "cannot size a string type");
    check(H5Tset_cset(type, cset), "cannot set the character set of a string type");
    std::vector<char> buffer(size * static_cast<size_t>(n));
    if (n > 0) check(read(type, buffer.data()), "cannot read " + what);
    for (hssize_t i = 0; i < n; ++i) {
      std::string item(buffer.data() + i * size, size);
      out.push_back(item.substr(0, item.find('\0')));
    }
  }
  return out;
}

Handle open_attr(hid_t loc, const char* name, const std::string& where) {
  if (H5Aexists(loc, name) <= 0) fail(where + ": missing attribute '" + name + "'");
  return Handle(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, std::string("cannot open attribute '") + name + "'");
}

std::vector<std::string> read_attr_strings(hid_t loc, const char* name, const std::string& where) {
  Handle attr = open_attr(loc, name, where);
  Handle type(H5Aget_type(attr), H5Tclose, "cannot read an attribute type");
  Handle space(H5Aget_space(attr), H5Sclose, "cannot read an attribute dataspace");
  return read_strings(type, space, [&](hid_t memtype, void* buffer) { return H5Aread(attr, memtype, buffer); },
                      std::string("attribute '") + name + "'");
}

std::string read_attr_string(hid_t loc, const char* name, const std::string& where) {
  std::vector<std::string> values = read_attr_strings(loc, name, where);
  if (values.size() != 1) fail(std::string("attribute '") + name + "': expected one string");
  return values[0];
}

/// A numeric scalar attribute of HDF5 class `type_class`, read as T (HDF5 converts).
template <class T>
T read_attr_number(hid_t loc, const char* name, hid_t memtype, H5T_class_t type_class, const std::string& where) {
  Handle attr = open_attr(loc, name, where);
  Handle type(H5Aget_type(attr), H5Tclose, "cannot read an attribute type");
  Handle space(H5Aget_space(attr), H5Sclose, "cannot read an attribute dataspace");
  if (H5Tget_class(type) != type_class || H5Sget_simple_extent_npoints(space) != 1)
    fail(std::string("attribute '") + name + "': expected a " +
         (type_class == H5T_INTEGER ? "scalar integer" : "scalar float"));
  T value{};
  check(H5Aread(attr, memtype, &value), std::string("cannot read attribute '") + name + "'");
  return value;
}

int64_t read_attr_i64(hid_t loc, const char* name, const std::string& where) {
  return read_attr_number<int64_t>(loc, name, H5T_NATIVE_INT64, H5T_INTEGER, where);
}

double read_attr_f64(hid_t loc, const char* name, const std::string& where) {
  return read_attr_number<double>(loc, name, H5T_NATIVE_DOUBLE, H5T_FLOAT, where);
}

std::string read_string_dataset(hid_t loc, const std::string& name) {
  if (!has_link(loc, name.c_str())) fail("missing dataset '" + name + "'");
  Handle dataset(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset '" + name + "'");
  Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of '" + name + "'");
  Handle space(H5Dget_space(dataset), H5Sclose, "cannot read the dataspace of '" + name + "'");
  std::vector<std::string> values = read_strings(
      type, space, [&](hid_t memtype, void* buffer) { return H5Dread(dataset, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer); },
      "dataset '" + name + "'");
  if (values.size() != 1) fail("dataset '" + name + "': expected one string");
  return values[0];
}

Tensor read_tensor(hid_t loc, const std::string& name, const std::string& what) {
  Handle dataset(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open " + what);
  Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of " + what);
  if (H5Tget_class(type) != H5T_FLOAT) fail(what + ": expected a float dataset");
  Handle space(H5Dget_space(dataset), H5Sclose, "cannot read the dataspace of " + what);
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) fail("cannot read the shape of " + what + hdf5_detail());
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  Tensor tensor = Tensor::empty(Shape(dims.begin(), dims.end()));
  if (tensor.numel() > 0)
    check(H5Dread(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data<float>()), "cannot read " + what);
  return tensor;
}

/// The member names of a group: in creation order when the group tracks it, else by name.
std::vector<std::string> member_names(hid_t group, const std::string& what) {
  Handle gcpl(H5Gget_create_plist(group), H5Pclose, "cannot read the properties of " + what);
  unsigned order_flags = 0;
  check(H5Pget_link_creation_order(gcpl, &order_flags), "cannot read the link order of " + what);
  const H5_index_t index = (order_flags & H5P_CRT_ORDER_TRACKED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  H5G_info_t info;
  check(H5Gget_info(group, &info), "cannot read " + what);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size = H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (size < 0) fail("cannot list " + what + hdf5_detail());
    std::string name(static_cast<size_t>(size) + 1, '\0');
    H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<size_t>(size));
    names.push_back(name);
  }
  return names;
}

Checkpoint read_contents(hid_t file) {
  Checkpoint ckpt;
  if (H5Aexists(file, "format") <= 0) fail("not a lat checkpoint (no 'format' attribute)");
  const std::string format = read_attr_string(file, "format", "/");
  if (format != kFormat) fail("not a lat checkpoint (format is '" + format + "', expected '" + kFormat + "')");
  const int64_t file_version = read_attr_i64(file, "version", "/");
  if (file_version > kCheckpointVersion)
    fail("checkpoint version " + std::to_string(file_version) + " is newer than this lat supports (" +
         std::to_string(kCheckpointVersion) + ")");
  if (file_version < 1) fail("unknown checkpoint version " + std::to_string(file_version));

  ckpt.step = read_attr_i64(file, "step", "/");
  ckpt.tokens_seen = read_attr_i64(file, "tokens_seen", "/");
  ckpt.val_loss = read_attr_f64(file, "val_loss", "/");
  ckpt.best_val_loss = read_attr_f64(file, "best_val_loss", "/");
  ckpt.lat_version = read_attr_string(file, "lat_version", "/");
  ckpt.created = read_attr_string(file, "created", "/");
  ckpt.frozen = read_attr_strings(file, "frozen", "/");
  ckpt.world_size = read_attr_i64(file, "world_size", "/");
  ckpt.config_yaml = read_string_dataset(file, "config");

  if (!has_link(file, "tokenizer")) fail("missing group 'tokenizer'");
  {
    Handle tokenizer(H5Gopen2(file, "tokenizer", H5P_DEFAULT), H5Gclose, "cannot open group 'tokenizer'");
    ckpt.tokenizer_type = read_attr_string(tokenizer, "type", "/tokenizer");
    if (has_link(tokenizer, "vocab")) ckpt.tokenizer_vocab = read_string_dataset(tokenizer, "vocab");
  }

  if (!has_link(file, "model")) fail("missing group 'model'");
  {
    Handle model(H5Gopen2(file, "model", H5P_DEFAULT), H5Gclose, "cannot open group 'model'");
    for (const std::string& name : member_names(model, "/model"))
      ckpt.model.emplace_back(name, read_tensor(model, name, "/model/" + name));
  }

  if (has_link(file, "optimizer")) {
    Handle optimizer(H5Gopen2(file, "optimizer", H5P_DEFAULT), H5Gclose, "cannot open group 'optimizer'");
    ckpt.optimizer.type = read_attr_string(optimizer, "type", "/optimizer");
    ckpt.optimizer.step = read_attr_i64(optimizer, "step", "/optimizer");
    for (const std::string& name : member_names(optimizer, "/optimizer")) {
      Handle group(H5Gopen2(optimizer, name.c_str(), H5P_DEFAULT), H5Gclose, "cannot open /optimizer/" + name);
      CheckpointParamState param{name, {}};
      for (const std::string& buffer : member_names(group, "/optimizer/" + name))
        param.buffers.emplace_back(buffer, read_tensor(group, buffer, "/optimizer/" + name + "/" + buffer));
      ckpt.optimizer.params.push_back(std::move(param));
    }
  }

  if (has_link(file, "rng")) ckpt.rng_state = read_string_dataset(file, "rng");

  if (has_link(file, "data")) {
    Handle data(H5Gopen2(file, "data", H5P_DEFAULT), H5Gclose, "cannot open group 'data'");
    std::vector<std::string> counter_names;
    check(H5Aiterate2(
              data, H5_INDEX_NAME, H5_ITER_INC, nullptr,
              [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
                static_cast<std::vector<std::string>*>(out)->push_back(name);
                return 0;
              },
              &counter_names),
          "cannot list the attributes of /data");
    for (const std::string& name : counter_names) ckpt.data.counters[name] = read_attr_i64(data, name.c_str(), "/data");
    if (has_link(data, "state")) ckpt.data.state = read_string_dataset(data, "state");
  }
  return ckpt;
}

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
    Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
                "cannot create '" + tmp + "'");
    created = true;
    write_contents(file, ckpt);
    check(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush '" + tmp + "'");
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

Checkpoint load_checkpoint(const std::string& path) {
  const std::string where = "load_checkpoint: '" + path + "': ";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(where + "no such file");
  if (std::filesystem::is_directory(path, ec))
    throw Error(where + "is a directory (resolve_checkpoint finds a run's latest checkpoint)");
  SilenceHdf5Errors silence;
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw Error(where + "not an HDF5 file (another format, or truncated)");
  }
  try {
    Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose,
                "cannot open as HDF5, the file may be truncated");
    return read_contents(file);
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
}

}  // namespace lat
