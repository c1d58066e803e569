// Checkpoints (train/files/checkpoint.h): bit-exact round trip, the HDF5 layout of DESIGN.md read
// back with the HDF5 C API, bad files, version check, atomic save, and the run directory's
// latest / prune / stale tmp / metrics.jsonl handling.
#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "lat/version.h"
#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/files/checkpoint.h"
#include "train/files/checksum.h"
#include "train/files/run_dir.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

using CheckpointTest = TempDirTest;

bool bit_equal(const lat::Tensor& a, const lat::Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  return std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

/// A checkpoint with every part filled: odd shapes, a scalar, extreme finite float values, a
/// frozen parameter without optimizer state, a non-ASCII vocabulary and a config larger
/// than an HDF5 attribute could hold (64 KiB).
lat::Checkpoint sample_checkpoint() {
  lat::Generator gen(7);
  lat::Checkpoint ckpt;
  ckpt.step = 1234;
  ckpt.tokens_seen = 9876543210LL;
  ckpt.val_loss = 1.5432109876543211;
  ckpt.best_val_loss = 1.25;
  ckpt.lat_version = "9.9.9-test";
  ckpt.created = "2025-01-31T12:34:56Z";
  ckpt.frozen = {"embeddings.weight"};
  ckpt.world_size = 4;
  ckpt.config_yaml = "model:\n  d_model: 8\n# " + std::string(100000, 'x') + "\n";
  ckpt.tokenizer_type = "char";
  ckpt.tokenizer_vocab = "\n !,.:;?ABCabcé→";
  lat::Tensor special = lat::Tensor::from_vector(
      std::vector<float>{0.0f, -0.0f, 1e-45f, -3.4e38f, std::numeric_limits<float>::max(),
                         std::numeric_limits<float>::min()},
      {2, 3});
  ckpt.model = {
      {"embeddings.weight", lat::Tensor::randn({5, 3}, gen)},
      {"layers.0.attn.q_proj.weight", lat::Tensor::randn({4, 3}, gen)},
      {"layers.0.attn.A_log", lat::Tensor::randn({2}, gen)},
      {"layers.0.attn.q_conv1d.weight", lat::Tensor::randn({4, 1, 3}, gen)},
      {"norm.scale", lat::Tensor::scalar(0.75)},
      {"a_special", special},
  };
  ckpt.optimizer.type = "adamw";
  ckpt.optimizer.step = 1234;
  for (size_t i = 1; i < ckpt.model.size(); ++i) {
    const auto& [name, weight] = ckpt.model[i];
    ckpt.optimizer.params.push_back(
        {name,
         {{"exp_avg", lat::Tensor::randn(weight.shape(), gen)}, {"exp_avg_sq", lat::Tensor::randn(weight.shape(), gen)}}});
  }
  gen.normal();
  ckpt.rng_state = gen.state();
  ckpt.data.counters = {{"epoch", 3}, {"position", 123456789012LL}};
  lat::Generator loader_gen(99);
  loader_gen.uniform();
  ckpt.data.state = loader_gen.state();
  return ckpt;
}

void expect_equal(const lat::Checkpoint& a, const lat::Checkpoint& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.tokens_seen, b.tokens_seen);
  EXPECT_EQ(std::memcmp(&a.val_loss, &b.val_loss, sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(&a.best_val_loss, &b.best_val_loss, sizeof(double)), 0);
  EXPECT_EQ(a.lat_version, b.lat_version);
  EXPECT_EQ(a.created, b.created);
  EXPECT_EQ(a.frozen, b.frozen);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.config_yaml, b.config_yaml);
  EXPECT_EQ(a.tokenizer_type, b.tokenizer_type);
  EXPECT_EQ(a.tokenizer_vocab, b.tokenizer_vocab);
  ASSERT_EQ(a.model.size(), b.model.size());
  for (size_t i = 0; i < a.model.size(); ++i) {
    EXPECT_EQ(a.model[i].first, b.model[i].first);  // the saved order, not sorted by name
    EXPECT_TRUE(bit_equal(a.model[i].second, b.model[i].second)) << a.model[i].first;
  }
  EXPECT_EQ(a.optimizer.type, b.optimizer.type);
  EXPECT_EQ(a.optimizer.step, b.optimizer.step);
  ASSERT_EQ(a.optimizer.params.size(), b.optimizer.params.size());
  for (size_t i = 0; i < a.optimizer.params.size(); ++i) {
    const lat::CheckpointParamState& pa = a.optimizer.params[i];
    const lat::CheckpointParamState& pb = b.optimizer.params[i];
    EXPECT_EQ(pa.name, pb.name);
    ASSERT_EQ(pa.buffers.size(), pb.buffers.size());
    for (size_t j = 0; j < pa.buffers.size(); ++j) {
      EXPECT_EQ(pa.buffers[j].first, pb.buffers[j].first);
      EXPECT_TRUE(bit_equal(pa.buffers[j].second, pb.buffers[j].second)) << pa.name << "/" << pa.buffers[j].first;
    }
  }
  EXPECT_EQ(a.rng_state, b.rng_state);
  EXPECT_EQ(a.data.counters, b.data.counters);
  EXPECT_EQ(a.data.state, b.data.state);
}

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  const lat::Checkpoint saved = sample_checkpoint();
  lat::save_checkpoint(path("ckpt_00001234.h5"), saved);
  const lat::Checkpoint loaded = lat::load_checkpoint(path("ckpt_00001234.h5"));
  expect_equal(loaded, saved);
  EXPECT_EQ(loaded.model[4].second.shape(), lat::Shape{});  // scalar stays a scalar
  EXPECT_FALSE(fs::exists(path("ckpt_00001234.h5.tmp")));

  // The restored generator continues the saved sequence.
  lat::Generator original(7), restored(0);
  original.set_state(saved.rng_state);
  restored.set_state(loaded.rng_state);
  EXPECT_EQ(original.normal(), restored.normal());
}

TEST_F(CheckpointTest, DefaultsFillVersionAndCreatedAndAllowNoOptimizer) {
  lat::Checkpoint ckpt;
  ckpt.tokenizer_type = "byte";
  ckpt.model = {{"w", lat::Tensor::from_vector(std::vector<float>{1, 2}, {2})}};
  lat::save_checkpoint(path("c.h5"), ckpt);
  const lat::Checkpoint loaded = lat::load_checkpoint(path("c.h5"));
  EXPECT_EQ(loaded.lat_version, lat::version());
  EXPECT_TRUE(std::regex_match(loaded.created, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"))) << loaded.created;
  EXPECT_TRUE(std::isnan(loaded.val_loss));
  EXPECT_TRUE(loaded.frozen.empty());
  EXPECT_TRUE(loaded.optimizer.type.empty());
  EXPECT_TRUE(loaded.optimizer.params.empty());
  EXPECT_TRUE(loaded.tokenizer_vocab.empty());
  EXPECT_EQ(loaded.tokenizer_type, "byte");
}

// ---- the layout, read with the HDF5 C API ---------------------------------------------------

std::set<std::string> attribute_names(hid_t loc) {
  std::set<std::string> names;
  H5Aiterate2(
      loc, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
        static_cast<std::set<std::string>*>(out)->insert(name);
        return 0;
      },
      &names);
  return names;
}

/// Class, size, variable-length-string and UTF-8 flags, and element count of an attribute.
struct AttrInfo {
  H5T_class_t type_class;
  size_t size;
  bool variable_string;
  bool utf8;
  hssize_t count;
  int rank;
};

AttrInfo attr_info(hid_t loc, const char* name) {
  hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
  EXPECT_GE(attr, 0) << name;
  hid_t type = H5Aget_type(attr);
  hid_t space = H5Aget_space(attr);
  AttrInfo info{H5Tget_class(type), H5Tget_size(type), false, false, H5Sget_simple_extent_npoints(space),
                H5Sget_simple_extent_ndims(space)};
  if (info.type_class == H5T_STRING) {
    info.variable_string = H5Tis_variable_str(type) > 0;
    info.utf8 = H5Tget_cset(type) == H5T_CSET_UTF8;
  }
  H5Sclose(space);
  H5Tclose(type);
  H5Aclose(attr);
  return info;
}

std::string read_vlen_attr(hid_t loc, const char* name) {
  hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
  hid_t stored = H5Aget_type(attr);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5Tget_cset(stored));
  H5Tclose(stored);
  char* value = nullptr;
  EXPECT_GE(H5Aread(attr, type, &value), 0);
  std::string out = value ? value : "";
  H5free_memory(value);
  H5Tclose(type);
  H5Aclose(attr);
  return out;
}

/// A fixed-length string attribute, as its bytes up to the first NUL.
std::string read_fixed_attr(hid_t loc, const char* name) {
  hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
  hid_t type = H5Aget_type(attr);
  std::string bytes(H5Tget_size(type), '\0');
  EXPECT_GE(H5Aread(attr, type, bytes.data()), 0);
  H5Tclose(type);
  H5Aclose(attr);
  return bytes.substr(0, bytes.find('\0'));
}

TEST_F(CheckpointTest, FileLayoutMatchesDesign) {
  const lat::Checkpoint ckpt = sample_checkpoint();
  lat::save_checkpoint(path("c.h5"), ckpt);
  hid_t file = H5Fopen(path("c.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);

  EXPECT_EQ(attribute_names(file),
            (std::set<std::string>{"format", "version", "step", "tokens_seen", "val_loss", "best_val_loss",
                                   "lat_version", "created", "frozen", "world_size"}));
  for (const char* name : {"format", "lat_version", "created"}) {
    AttrInfo info = attr_info(file, name);
    EXPECT_EQ(info.type_class, H5T_STRING) << name;
    EXPECT_TRUE(info.variable_string) << name;
    EXPECT_TRUE(info.utf8) << name;
  }
  EXPECT_EQ(read_vlen_attr(file, "format"), "lat-checkpoint");
  for (const char* name : {"version", "step", "tokens_seen", "world_size"}) {
    AttrInfo info = attr_info(file, name);
    EXPECT_EQ(info.type_class, H5T_INTEGER) << name;
    EXPECT_EQ(info.size, 8u) << name;
  }
  int64_t version = 0, step = 0;
  hid_t attr = H5Aopen(file, "version", H5P_DEFAULT);
  H5Aread(attr, H5T_NATIVE_INT64, &version);
  H5Aclose(attr);
  attr = H5Aopen(file, "step", H5P_DEFAULT);
  H5Aread(attr, H5T_NATIVE_INT64, &step);
  H5Aclose(attr);
  EXPECT_EQ(version, 2);
  EXPECT_EQ(step, 1234);
  for (const char* name : {"val_loss", "best_val_loss"}) {
    AttrInfo info = attr_info(file, name);
    EXPECT_EQ(info.type_class, H5T_FLOAT) << name;
    EXPECT_EQ(info.size, 8u) << name;
  }
  AttrInfo frozen = attr_info(file, "frozen");
  EXPECT_EQ(frozen.type_class, H5T_STRING);
  EXPECT_TRUE(frozen.variable_string);
  EXPECT_EQ(frozen.rank, 1);
  EXPECT_EQ(frozen.count, 1);

  // /config: a string dataset (not an attribute: it is over 64 KiB).
  {
    H5O_info_t info;
    ASSERT_GE(H5Oget_info_by_name(file, "config", &info, H5P_DEFAULT), 0);
    EXPECT_EQ(info.type, H5O_TYPE_DATASET);
    hid_t dataset = H5Dopen2(file, "config", H5P_DEFAULT);
    hid_t type = H5Dget_type(dataset);
    EXPECT_EQ(H5Tget_class(type), H5T_STRING);
    EXPECT_GT(H5Tis_variable_str(type), 0);
    EXPECT_EQ(H5Tget_cset(type), H5T_CSET_UTF8);
    // Its checksum: the global heap that holds variable-length strings has none of its own.
    EXPECT_EQ(read_fixed_attr(dataset, "crc32"),
              lat::crc32_hex(lat::crc32_of(ckpt.config_yaml.data(), ckpt.config_yaml.size())));
    H5Tclose(type);
    H5Dclose(dataset);
  }

  // /model/<dotted name>: f32 datasets with the tensor's shape, directly under /model.
  for (const auto& [name, tensor] : ckpt.model) {
    const std::string link = "/model/" + name;
    hid_t dataset = H5Dopen2(file, link.c_str(), H5P_DEFAULT);
    ASSERT_GE(dataset, 0) << link;
    hid_t type = H5Dget_type(dataset);
    EXPECT_EQ(H5Tget_class(type), H5T_FLOAT) << link;
    EXPECT_EQ(H5Tget_size(type), 4u) << link;
    hid_t space = H5Dget_space(dataset);
    std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(space)));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    EXPECT_EQ(lat::Shape(dims.begin(), dims.end()), tensor.shape()) << link;
    // crc32: the checksum of the data as 8 hex digits, a fixed-length NULLPAD string.
    EXPECT_EQ(attribute_names(dataset), std::set<std::string>{"crc32"}) << link;
    const AttrInfo crc = attr_info(dataset, "crc32");
    EXPECT_EQ(crc.type_class, H5T_STRING) << link;
    EXPECT_FALSE(crc.variable_string) << link;
    EXPECT_EQ(crc.size, 8u) << link;
    EXPECT_EQ(read_fixed_attr(dataset, "crc32"), lat::crc32_hex(lat::tensor_crc32(tensor))) << link;
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(dataset);
  }
  H5G_info_t model_info;
  H5Gget_info_by_name(file, "model", &model_info, H5P_DEFAULT);
  EXPECT_EQ(model_info.nlinks, ckpt.model.size());

  // /optimizer: attrs type and step; per-parameter groups with exp_avg, exp_avg_sq.
  hid_t optimizer = H5Gopen2(file, "optimizer", H5P_DEFAULT);
  ASSERT_GE(optimizer, 0);
  EXPECT_EQ(read_vlen_attr(optimizer, "type"), "adamw");
  EXPECT_EQ(attr_info(optimizer, "step").type_class, H5T_INTEGER);
  H5Gclose(optimizer);
  EXPECT_GT(H5Lexists(file, "/optimizer/layers.0.attn.q_proj.weight", H5P_DEFAULT), 0);
  EXPECT_GT(H5Oexists_by_name(file, "/optimizer/layers.0.attn.q_proj.weight/exp_avg", H5P_DEFAULT), 0);
  EXPECT_GT(H5Oexists_by_name(file, "/optimizer/layers.0.attn.q_proj.weight/exp_avg_sq", H5P_DEFAULT), 0);
  EXPECT_EQ(H5Lexists(file, "/optimizer/embeddings.weight", H5P_DEFAULT), 0);  // frozen: no state

  // /tokenizer: attr type, dataset vocab; /rng and /data present.
  hid_t tokenizer = H5Gopen2(file, "tokenizer", H5P_DEFAULT);
  EXPECT_EQ(read_vlen_attr(tokenizer, "type"), "char");
  EXPECT_GT(H5Lexists(tokenizer, "vocab", H5P_DEFAULT), 0);
  H5Gclose(tokenizer);
  EXPECT_GT(H5Lexists(file, "rng", H5P_DEFAULT), 0);
  EXPECT_GT(H5Lexists(file, "data", H5P_DEFAULT), 0);
  H5Fclose(file);
}

// ---- bad files ------------------------------------------------------------------------------

TEST_F(CheckpointTest, MissingTextAndTruncatedFilesAreErrorsNamingTheFile) {
  const std::string missing = path("missing.h5");
  expect_error([&] { lat::load_checkpoint(missing); }, {"'" + missing + "'", "no such file"});

  const std::string text = path("notes.h5");
  write_bytes(text, "this is not an HDF5 file\n");
  expect_error([&] { lat::load_checkpoint(text); }, {"'" + text + "'", "not an HDF5 file"});
  EXPECT_EQ(read_bytes(text), "this is not an HDF5 file\n");
  // A llama.cpp file (magic "GGUF") is named as such.
  const std::string gguf = path("model.gguf");
  write_bytes(gguf, std::string("GGUF\x03\0\0\0", 8));
  expect_error([&] { lat::load_checkpoint(gguf); },
               {"'" + gguf + "'", "a GGUF file (llama.cpp's format, which lat exports but does not read)"});

  lat::save_checkpoint(path("full.h5"), sample_checkpoint());
  const std::string bytes = read_bytes(path("full.h5"));
  for (size_t keep : {bytes.size() / 2, bytes.size() - 100, size_t{100}}) {
    const std::string truncated = path("truncated.h5");
    write_bytes(truncated, bytes.substr(0, keep));
    expect_error([&] { lat::load_checkpoint(truncated); }, {"'" + truncated + "'"});
    EXPECT_EQ(read_bytes(truncated), bytes.substr(0, keep)) << "the file was modified";
  }
}

TEST_F(CheckpointTest, OtherHdf5FilesAreNotCheckpoints) {
  const std::string plain = path("plain.h5");
  hid_t file = H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(file);
  expect_error([&] { lat::load_checkpoint(plain); }, {"not a lat checkpoint (no 'format' attribute)"});

  lat::save_checkpoint(path("other.h5"), sample_checkpoint());
  file = H5Fopen(path("other.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  H5Adelete(file, "format");
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(file, "format", type, space, H5P_DEFAULT, H5P_DEFAULT);
  const char* value = "something-else";
  H5Awrite(attr, type, &value);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(file);
  expect_error([&] { lat::load_checkpoint(path("other.h5")); },
               {"format is 'something-else', expected 'lat-checkpoint'"});
}

// Other writers (h5py with numpy bytes, older files) store fixed-length ASCII strings.
TEST_F(CheckpointTest, FixedLengthAsciiStringsAreRead) {
  const lat::Checkpoint saved = sample_checkpoint();
  lat::save_checkpoint(path("fixed.h5"), saved);
  hid_t file = H5Fopen(path("fixed.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  H5Adelete(file, "format");
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, 20);  // longer than the text: NUL padded
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(file, "format", type, space, H5P_DEFAULT, H5P_DEFAULT);
  char value[20] = "lat-checkpoint";
  H5Awrite(attr, type, value);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(file);
  expect_equal(lat::load_checkpoint(path("fixed.h5")), saved);
}

/// A scalar fixed-length string of `size` bytes with padding `pad`, as attribute `name` of
/// `loc` (replacing it); `value` is written as it is (the caller pads it).
void put_fixed_attr(hid_t loc, const char* name, const std::string& value, H5T_str_t pad) {
  if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size());
  H5Tset_strpad(type, pad);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(H5Awrite(attr, type, value.data()), 0) << name;
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

/// The same as a scalar dataset `name` of `loc` (replacing it), UTF-8, with the crc32 of
/// `text` (what a reader must get back) as a version 2 file carries it.
void put_fixed_dataset(hid_t loc, const char* name, const std::string& value, H5T_str_t pad, const std::string& text) {
  if (H5Lexists(loc, name, H5P_DEFAULT) > 0) H5Ldelete(loc, name, H5P_DEFAULT);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size());
  H5Tset_strpad(type, pad);
  H5Tset_cset(type, H5T_CSET_UTF8);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t dataset = H5Dcreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, value.data()), 0) << name;
  put_fixed_attr(dataset, "crc32", lat::crc32_hex(lat::crc32_of(text.data(), text.size())), H5T_STR_NULLPAD);
  H5Dclose(dataset);
  H5Sclose(space);
  H5Tclose(type);
}

// h5py stores numpy bytes as fixed-length NULLPAD strings, filling every byte when the text is
// as long as the type: each stored character is read, the last one included, in every padding.
TEST_F(CheckpointTest, FixedLengthStringsOfEveryPaddingReadCompletely) {
  const lat::Checkpoint saved = sample_checkpoint();
  const std::string vocab = saved.tokenizer_vocab;  // ends in a 3-byte UTF-8 character
  struct Case {
    H5T_str_t pad;
    std::string format, vocab;  // the stored bytes
  };
  const std::vector<Case> cases = {
      {H5T_STR_NULLPAD, "lat-checkpoint", vocab},  // exactly as long as the text: no NUL at all
      {H5T_STR_NULLPAD, std::string("lat-checkpoint\0\0", 16), vocab + std::string(3, '\0')},
      {H5T_STR_NULLTERM, std::string("lat-checkpoint\0", 15), vocab + '\0'},
      {H5T_STR_SPACEPAD, "lat-checkpoint   ", vocab + "  "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("padding " + std::to_string(c.pad) + ", " + std::to_string(c.format.size()) + " bytes");
    const std::string file_path = path("fixed.h5");
    lat::save_checkpoint(file_path, saved);
    hid_t file = H5Fopen(file_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    put_fixed_attr(file, "format", c.format, c.pad);
    hid_t tokenizer = H5Gopen2(file, "tokenizer", H5P_DEFAULT);
    put_fixed_dataset(tokenizer, "vocab", c.vocab, c.pad, vocab);
    H5Gclose(tokenizer);
    H5Fclose(file);
    expect_equal(lat::load_checkpoint(file_path), saved);
  }
}

TEST_F(CheckpointTest, NewerVersionIsAnError) {
  const std::string file_path = path("v2.h5");
  lat::save_checkpoint(file_path, sample_checkpoint());
  ASSERT_NO_FATAL_FAILURE(overwrite_int64_attribute(file_path, "version", 3));
  expect_error([&] { lat::load_checkpoint(file_path); },
               {"checkpoint version 3 is newer than this lat supports (2)", file_path});
}

// A tokenizer type this lat does not know would otherwise read as a model trained on token
// ids, and its text would come out as numbers.
TEST_F(CheckpointTest, AnUnknownTokenizerTypeIsAnErrorNamingTheFileAndTheType) {
  lat::Checkpoint c = sample_checkpoint();
  c.tokenizer_type = "wordpiece";
  const std::string file_path = path("wordpiece.h5");
  lat::save_checkpoint(file_path, c);
  for (lat::CheckpointParts parts : {lat::CheckpointParts::all, lat::CheckpointParts::weights_only})
    expect_error([&] { lat::load_checkpoint(file_path, parts); },
                 {"load_checkpoint: '" + file_path + "': /tokenizer attribute 'type'",
                  "expected char, byte, bpe, sentencepiece or none, got 'wordpiece'"});
  c.tokenizer_type = "none";
  c.tokenizer_vocab.clear();
  lat::save_checkpoint(path("none.h5"), c);
  EXPECT_EQ(lat::load_checkpoint(path("none.h5")).tokenizer_type, "none");
}

// A char vocabulary that repeats a character gives two ids one meaning: refused where the file
// is read, so the message names it.
TEST_F(CheckpointTest, ACharVocabularyRepeatingACharacterIsAnErrorNamingTheFile) {
  lat::Checkpoint c = sample_checkpoint();
  c.tokenizer_vocab = "abca";
  const std::string file_path = path("twice.h5");
  lat::save_checkpoint(file_path, c);
  expect_error([&] { lat::load_checkpoint(file_path, lat::CheckpointParts::weights_only); },
               {"load_checkpoint: '" + file_path + "': /tokenizer/vocab: ",
                "character 'a' (U+0061) appears twice (ids 0 and 3)"});
}

/// Deletes attribute `name` of every dataset under `group` and its subgroups.
void delete_dataset_attributes(hid_t group, const char* name) {
  struct Visit {
    const char* name;
  } visit{name};
  H5Ovisit(
      group, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t loc, const char* path, const H5O_info_t* info, void* data) -> herr_t {
        const char* attr = static_cast<Visit*>(data)->name;
        if (info->type == H5O_TYPE_DATASET && H5Aexists_by_name(loc, path, attr, H5P_DEFAULT) > 0)
          H5Adelete_by_name(loc, path, attr, H5P_DEFAULT);
        return 0;
      },
      &visit);
}

// Version 1 files (before tensor checksums) load without them; a version 2 file must carry one
// per tensor.
TEST_F(CheckpointTest, Version1LoadsWithoutChecksumsVersion2RequiresThem) {
  const lat::Checkpoint saved = sample_checkpoint();
  const std::string file_path = path("old.h5");
  lat::save_checkpoint(file_path, saved);
  hid_t file = H5Fopen(file_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  H5Adelete_by_name(file, "/model/layers.0.attn.A_log", "crc32", H5P_DEFAULT);
  H5Fclose(file);
  std::string bytes = read_bytes(file_path);
  expect_error([&] { lat::load_checkpoint(file_path); },
               {"'" + file_path + "'", "/model/layers.0.attn.A_log: missing attribute 'crc32'",
                "a version 2 checkpoint stores a checksum with every dataset"});
  EXPECT_EQ(read_bytes(file_path), bytes) << "the file was modified";

  file = H5Fopen(file_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  delete_dataset_attributes(file, "crc32");
  H5Fclose(file);
  bytes = read_bytes(file_path);
  expect_error([&] { lat::load_checkpoint(file_path); },
               {"'" + file_path + "'", "dataset 'config': missing attribute 'crc32'"});
  EXPECT_EQ(read_bytes(file_path), bytes) << "the file was modified";
  ASSERT_NO_FATAL_FAILURE(overwrite_int64_attribute(file_path, "version", 1));
  expect_equal(lat::load_checkpoint(file_path), saved);
}

// Inference reads the weights only: optimizer state it does not need is never opened (here an
// /optimizer moment whose header claims 10^9 elements that were never written).
TEST_F(CheckpointTest, WeightsOnlyNeverOpensTheOptimizer) {
  const lat::Checkpoint saved = sample_checkpoint();
  const std::string file_path = path("c.h5");
  lat::save_checkpoint(file_path, saved);
  hid_t file = H5Fopen(file_path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const std::string moment = "/optimizer/layers.0.attn.A_log/exp_avg";
  H5Ldelete(file, moment.c_str(), H5P_DEFAULT);
  const hsize_t huge = 1000000000;
  hid_t space = H5Screate_simple(1, &huge, nullptr);
  hid_t dataset = H5Dcreate2(file, moment.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(dataset, 0);
  H5Dclose(dataset);
  H5Sclose(space);
  H5Fclose(file);
  const std::string bytes = read_bytes(file_path);

  expect_error([&] { lat::load_checkpoint(file_path); },
               {"'" + file_path + "'", moment + ": shape [1000000000] of 4-byte elements needs 4000000000 bytes",
                "more than the whole file holds"});
  const lat::Checkpoint weights = lat::load_checkpoint(file_path, lat::CheckpointParts::weights_only);
  lat::Checkpoint expected = saved;
  expected.optimizer = {};
  expected.rng_state.clear();
  expected.data = {};
  expect_equal(weights, expected);
  EXPECT_EQ(read_bytes(file_path), bytes) << "the file was modified";
}

// ---- atomic save --------------------------------------------------------------------------

TEST_F(CheckpointTest, FailedSaveLeavesTheCompleteCheckpointUntouched) {
  const std::string target = path("ckpt_00000001.h5");
  lat::Checkpoint first = sample_checkpoint();
  lat::save_checkpoint(target, first);
  const std::string original = read_bytes(target);

  // A failure in the middle of writing (the third model tensor is not f32): the error names
  // the file, the partial temporary file is removed, the checkpoint keeps its bytes.
  lat::Checkpoint broken = sample_checkpoint();
  broken.step = 2;
  broken.model[2].second = lat::Tensor::from_vector(std::vector<int64_t>{1, 2}, {2});
  expect_error([&] { lat::save_checkpoint(target, broken); }, {target, "expected dtype f32, got i64"});
  EXPECT_FALSE(fs::exists(target + ".tmp"));
  EXPECT_EQ(read_bytes(target), original);

  // The temporary path cannot be created (a directory is in the way).
  fs::create_directories(target + ".tmp/blocker");
  expect_error([&] { lat::save_checkpoint(target, broken); }, {target + ".tmp"});
  EXPECT_TRUE(fs::is_directory(target + ".tmp/blocker"));  // not ours: left alone
  EXPECT_EQ(read_bytes(target), original);
  expect_equal(lat::load_checkpoint(target), first);
  fs::remove_all(target + ".tmp");

  // A successful save replaces the checkpoint and leaves no temporary file.
  lat::Checkpoint second = sample_checkpoint();
  second.step = 2;
  lat::save_checkpoint(target, second);
  EXPECT_EQ(lat::load_checkpoint(target).step, 2);
  EXPECT_FALSE(fs::exists(target + ".tmp"));
}

// A disk that fills up while the checkpoint is written (here: a file size limit, EFBIG): the
// error names the file and the reason, the old checkpoint keeps its bytes, and the process
// then exits normally (HDF5 used to crash at exit on the file whose close had failed).
TEST_F(CheckpointTest, WriteErrorOnAFullDiskIsReportedAndTheProcessExitsCleanly) {
  const std::string target = path("ckpt_00000001.h5");
  lat::save_checkpoint(target, sample_checkpoint());
  const std::string original = read_bytes(target);
  lat::Checkpoint big = sample_checkpoint();
  big.step = 2;
  big.model[0].second = lat::Tensor::zeros({1 << 20});  // 4 MiB
  auto save_under_a_file_size_limit = [&] {
    std::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing us
    const rlimit limit{1 << 18, 1 << 18};
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      lat::save_checkpoint(target, big);
    } catch (const lat::Error& e) {
      std::fprintf(stderr, "caught: %s\n", e.what());
      std::exit(fs::exists(target + ".tmp") || read_bytes(target) != original ? 3 : 0);
    }
    std::exit(4);
  };
  EXPECT_EXIT(save_under_a_file_size_limit(), ::testing::ExitedWithCode(0),
              "caught: save_checkpoint: '.*ckpt_00000001.h5': .*File too large");
  EXPECT_EQ(read_bytes(target), original);
}

TEST_F(CheckpointTest, InvalidNamesAreRejectedBeforeWriting) {
  lat::Checkpoint ckpt;
  ckpt.model = {{"a/b", lat::Tensor::from_vector(std::vector<float>{1}, {1})}};
  expect_error([&] { lat::save_checkpoint(path("x.h5"), ckpt); }, {"invalid name 'a/b'"});
  ckpt.model = {{"w", lat::Tensor::from_vector(std::vector<float>{1}, {1})},
                {"w", lat::Tensor::from_vector(std::vector<float>{2}, {1})}};
  expect_error([&] { lat::save_checkpoint(path("x.h5"), ckpt); }, {"duplicate name 'w'"});
  ckpt.model.pop_back();
  ckpt.tokenizer_vocab = std::string("a\0b", 3);
  expect_error([&] { lat::save_checkpoint(path("x.h5"), ckpt); }, {"tokenizer_vocab"});
  EXPECT_FALSE(fs::exists(path("x.h5")));
  EXPECT_FALSE(fs::exists(path("x.h5.tmp")));
}

// ---- the run directory ---------------------------------------------------------------------

void touch(const fs::path& file) { std::ofstream(file) << "x"; }

TEST_F(CheckpointTest, FileNamesLatestAndResolve) {
  EXPECT_EQ(lat::checkpoint_file_name(100), "ckpt_00000100.h5");
  EXPECT_EQ(lat::checkpoint_file_name(0), "ckpt_00000000.h5");
  EXPECT_EQ(lat::checkpoint_file_name(123456789), "ckpt_123456789.h5");

  // Empty run directory: nothing to resume, and resolving is an error naming it.
  EXPECT_FALSE(lat::find_latest_checkpoint(dir_.string()).has_value());
  expect_error<lat::ConfigError>([&] { lat::resolve_checkpoint(dir_.string()); },
                                 {"no checkpoint in this run directory"});
  expect_error<lat::ConfigError>([&] { lat::resolve_checkpoint(path("nowhere")); }, {"no such file or directory"});

  // Without `latest`, the highest step wins (not the last name in directory order).
  touch(dir_ / "ckpt_00000900.h5");
  touch(dir_ / "ckpt_00001000.h5");
  touch(dir_ / "ckpt_00000100.h5");
  EXPECT_EQ(lat::find_latest_checkpoint(dir_.string()), path("ckpt_00001000.h5"));

  // `latest` wins, and a file path resolves to itself.
  lat::write_latest(dir_.string(), "ckpt_00000900.h5");
  EXPECT_EQ(read_bytes(path("latest")), "ckpt_00000900.h5\n");
  EXPECT_FALSE(fs::exists(path("latest.tmp")));
  EXPECT_EQ(lat::resolve_checkpoint(dir_.string()), path("ckpt_00000900.h5"));
  EXPECT_EQ(lat::resolve_checkpoint(path("ckpt_00000100.h5")), path("ckpt_00000100.h5"));

  // `latest` naming a missing file is an error, not a silent fallback.
  lat::write_latest(dir_.string(), "ckpt_00000500.h5");
  expect_error([&] { lat::resolve_checkpoint(dir_.string()); }, {"ckpt_00000500.h5", "does not exist"});

  // A huge `latest` is read only as far as a file name goes: a short one-line error.
  std::ofstream(dir_ / "latest") << std::string(200'000, 'a');
  expect_error([&] { lat::resolve_checkpoint(dir_.string()); },
               {"read_latest: '" + path("latest") + "': more than 256 bytes, expected one checkpoint file name"});
  lat::write_latest(dir_.string(), "ckpt_00000500.h5");

  expect_error([&] { lat::write_latest(dir_.string(), "../x.h5"); }, {"expected ckpt_<step>.h5"});
}

// A checkpoint name carries its step only in checkpoint_file_name's own form: a stray copy
// (an int64 overflow, other padding, a sign) is listed apart, warned about by the lookup, and
// never taken for the newest checkpoint.
TEST_F(CheckpointTest, OnlyCanonicalNamesCarryAStep) {
  EXPECT_EQ(lat::checkpoint_step("ckpt_00000010.h5"), 10);
  EXPECT_EQ(lat::checkpoint_step("ckpt_00000000.h5"), 0);
  EXPECT_EQ(lat::checkpoint_step("ckpt_123456789.h5"), 123456789);
  EXPECT_EQ(lat::checkpoint_step("ckpt_9223372036854775807.h5"), INT64_MAX);
  for (const char* stray : {"ckpt_99999999999999999999.h5", "ckpt_9223372036854775808.h5", "ckpt_10.h5",
                            "ckpt_000000010.h5", "ckpt_-0000010.h5", "ckpt_+0000010.h5", "ckpt_0000001a.h5", "ckpt_.h5",
                            "ckpt_final.h5", "ckpt_00000010.h5.tmp", "model.h5"})
    EXPECT_FALSE(lat::checkpoint_step(stray).has_value()) << stray;

  for (const char* name :
       {"ckpt_00000010.h5", "ckpt_00000020.h5", "ckpt_99999999999999999999.h5", "ckpt_30.h5", "notes.h5"})
    touch(dir_ / name);
  const lat::CheckpointListing listing = lat::list_checkpoints(dir_.string());
  EXPECT_EQ(listing.checkpoints,
            (std::vector<std::pair<int64_t, std::string>>{{10, "ckpt_00000010.h5"}, {20, "ckpt_00000020.h5"}}));
  EXPECT_EQ(listing.ignored, (std::vector<std::string>{"ckpt_30.h5", "ckpt_99999999999999999999.h5"}));

  std::vector<std::string> warnings;
  const auto collect = [&](const std::string& line) { warnings.push_back(line); };
  EXPECT_EQ(lat::find_latest_checkpoint(dir_.string(), collect), path("ckpt_00000020.h5"));
  EXPECT_EQ(warnings,
            (std::vector<std::string>{
                "ignoring " + path("ckpt_30.h5") +
                    ": not a checkpoint name lat writes (ckpt_<step>.h5, the step an int64 in 8 or more digits)",
                "ignoring " + path("ckpt_99999999999999999999.h5") +
                    ": not a checkpoint name lat writes (ckpt_<step>.h5, the step an int64 in 8 or more "
                    "digits)"}));
  // Pruning counts only real checkpoints and leaves stray names alone.
  EXPECT_EQ(lat::prune_checkpoints(dir_.string(), 1), (std::vector<std::string>{"ckpt_00000010.h5"}));
  for (const char* kept : {"ckpt_00000020.h5", "ckpt_99999999999999999999.h5", "ckpt_30.h5"})
    EXPECT_TRUE(fs::exists(dir_ / kept)) << kept;
}

TEST_F(CheckpointTest, PruneKeepsTheNewestAndLatest) {
  for (int step : {100, 200, 300, 400, 500}) touch(dir_ / lat::checkpoint_file_name(step));
  touch(dir_ / "notes.h5");
  touch(dir_ / "ckpt_final.h5");
  lat::write_latest(dir_.string(), "ckpt_00000200.h5");  // e.g. resumed from an older step

  EXPECT_TRUE(lat::prune_checkpoints(dir_.string(), 0).empty());  // 0 = keep all
  EXPECT_EQ(lat::prune_checkpoints(dir_.string(), 2),
            (std::vector<std::string>{"ckpt_00000100.h5", "ckpt_00000300.h5"}));
  for (const char* kept : {"ckpt_00000200.h5", "ckpt_00000400.h5", "ckpt_00000500.h5", "notes.h5", "ckpt_final.h5"})
    EXPECT_TRUE(fs::exists(dir_ / kept)) << kept;
  EXPECT_FALSE(fs::exists(dir_ / "ckpt_00000100.h5"));
  EXPECT_FALSE(fs::exists(dir_ / "ckpt_00000300.h5"));

  lat::write_latest(dir_.string(), "ckpt_00000500.h5");
  EXPECT_EQ(lat::prune_checkpoints(dir_.string(), 1),
            (std::vector<std::string>{"ckpt_00000200.h5", "ckpt_00000400.h5"}));
  EXPECT_TRUE(fs::exists(dir_ / "ckpt_00000500.h5"));
}

TEST_F(CheckpointTest, StaleTmpFilesAreRemoved) {
  for (const char* name : {"ckpt_00000010.h5.tmp", "latest.tmp", "metrics.jsonl.tmp", "config.yaml.tmp",
                           "ckpt_00000010.h5", "notes.tmp", "latest"})
    touch(dir_ / name);
  EXPECT_EQ(lat::clean_stale_tmp(dir_.string()),
            (std::vector<std::string>{"ckpt_00000010.h5.tmp", "config.yaml.tmp", "latest.tmp", "metrics.jsonl.tmp"}));
  for (const char* kept : {"ckpt_00000010.h5", "notes.tmp", "latest"}) EXPECT_TRUE(fs::exists(dir_ / kept)) << kept;
  EXPECT_TRUE(lat::clean_stale_tmp(dir_.string()).empty());
}

TEST_F(CheckpointTest, MetricsAreTruncatedToTheCheckpointStep) {
  const std::string metrics = path("metrics.jsonl");
  write_bytes(metrics,
              "{\"step\": 10, \"loss\": 3.1}\n"
              "{\"step\": 20, \"loss\": 2.9}\n"
              "{\"step\": 20, \"val_loss\": 2.95, \"val_bpc\": 4.2}\n"
              "{\"step\": 30, \"loss\": 2.7}\n"
              "{\"step\": 40, \"lo");
  EXPECT_EQ(lat::truncate_metrics(metrics, 20), 2);
  EXPECT_EQ(read_bytes(metrics),
            "{\"step\": 10, \"loss\": 3.1}\n"
            "{\"step\": 20, \"loss\": 2.9}\n"
            "{\"step\": 20, \"val_loss\": 2.95, \"val_bpc\": 4.2}\n");
  EXPECT_FALSE(fs::exists(metrics + ".tmp"));
  EXPECT_EQ(lat::truncate_metrics(metrics, 20), 0);

  // A complete last record missing only its newline is kept, and the newline added.
  write_bytes(metrics, "{\"step\": 10, \"loss\": 3.1}\n{\"step\": 11, \"loss\": 3.0}");
  EXPECT_EQ(lat::truncate_metrics(metrics, 20), 0);
  EXPECT_EQ(read_bytes(metrics), "{\"step\": 10, \"loss\": 3.1}\n{\"step\": 11, \"loss\": 3.0}\n");

  // Resuming from step 0 drops every record; a missing file stays missing.
  EXPECT_EQ(lat::truncate_metrics(metrics, 0), 2);
  EXPECT_EQ(read_bytes(metrics), "");
  EXPECT_EQ(lat::truncate_metrics(path("none.jsonl"), 5), 0);
  EXPECT_FALSE(fs::exists(path("none.jsonl")));
}

}  // namespace
