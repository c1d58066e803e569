// What lat reads from HDF5 and what a resume accepts (DESIGN.md "Checkpoint (HDF5)", "The
// command line and the files a run writes"): soft, external and user-defined links refused by
// every reader; deflate/shuffle/fletcher32 datasets read (a gzip'd checkpoint resumes exactly),
// other filters and inflated chunks refused; a checkpoint whose parts disagree refused before
// anything in out_dir changes; a finished run changes no file. Every refusing resume checks
// the run directory byte for byte (run_dir_snapshot.h).
#include <gtest/gtest.h>

#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_files.h"
#include "tests/expect_error.h"
#include "tests/run_dir_snapshot.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/files/checkpoint.h"
#include "train/files/run_dir.h"
#include "train/files/trained_model.h"
#include "train/inference/info.h"
#include "train/run/trainer.h"

namespace fs = std::filesystem;

namespace lat {
namespace {

using testing::expect_error;
using testing::overwrite_int64_attribute;
using testing::overwrite_object_attribute;
using testing::read_bytes;
using testing::RunDirSnapshot;
using testing::write_bytes;

// ---- HDF5 editing helpers -------------------------------------------------------------------

/// Opens `path` read-write, runs `edit` on it and closes it. A fatal failure when it does not
/// open: call under ASSERT_NO_FATAL_FAILURE.
template <class Edit>
void edit_hdf5(const std::string& path, const Edit& edit) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  edit(file);
  ASSERT_GE(H5Fclose(file), 0) << path;
}

/// Copies every attribute of `from` to `to` in its stored type.
void copy_attributes(hid_t from, hid_t to) {
  H5O_info_t info;
  ASSERT_GE(H5Oget_info(from, &info), 0);
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    const hid_t attr = H5Aopen_by_idx(from, ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT);
    char name[256] = {};
    H5Aget_name(attr, sizeof name, name);
    const hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    std::vector<char> buffer(H5Tget_size(type) * static_cast<size_t>(H5Sget_simple_extent_npoints(space)) + 1);
    ASSERT_GE(H5Aread(attr, type, buffer.data()), 0) << name;
    const hid_t copy = H5Acreate2(to, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(copy, type, buffer.data()), 0) << name;
    if (H5Tis_variable_str(type) > 0) H5Dvlen_reclaim(type, space, H5P_DEFAULT, buffer.data());
    H5Aclose(copy);
    H5Sclose(space);
    H5Tclose(type);
    H5Aclose(attr);
  }
}

/// Copies the members of group `from` into `to`: groups recursively (keeping creation order),
/// array datasets chunked in about thirds of their first dimension with shuffle, deflate
/// (level 9) and fletcher32 as h5repack would, the rest (scalar strings) as they are.
void copy_gzipped(hid_t from, hid_t to) {
  const hid_t gcpl = H5Gget_create_plist(from);
  unsigned order = 0;
  H5Pget_link_creation_order(gcpl, &order);
  H5Pclose(gcpl);
  const H5_index_t index = (order & H5P_CRT_ORDER_TRACKED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  H5G_info_t info;
  ASSERT_GE(H5Gget_info(from, &info), 0);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[512] = {};
    H5Lget_name_by_idx(from, ".", index, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    const hid_t object = H5Oopen(from, name, H5P_DEFAULT);
    H5O_info_t object_info;
    ASSERT_GE(H5Oget_info(object, &object_info), 0);
    if (object_info.type == H5O_TYPE_GROUP) {
      // A fresh property list with the source's creation-order flags: a copied one would carry
      // the source file's addresses of its link storage.
      const hid_t source_gcpl = H5Gget_create_plist(object);
      unsigned group_order = 0;
      H5Pget_link_creation_order(source_gcpl, &group_order);
      H5Pclose(source_gcpl);
      const hid_t create = H5Pcreate(H5P_GROUP_CREATE);
      H5Pset_link_creation_order(create, group_order);
      const hid_t group = H5Gcreate2(to, name, H5P_DEFAULT, create, H5P_DEFAULT);
      copy_attributes(object, group);
      copy_gzipped(object, group);
      H5Gclose(group);
      H5Pclose(create);
    } else {
      const hid_t space = H5Dget_space(object), type = H5Dget_type(object);
      const int rank = H5Sget_simple_extent_ndims(space);
      if (rank < 1 || H5Sget_simple_extent_npoints(space) == 0) {
        ASSERT_GE(H5Ocopy(from, name, to, name, H5P_DEFAULT, H5P_DEFAULT), 0) << name;
      } else {
        std::vector<hsize_t> dims(static_cast<size_t>(rank)), chunk;
        H5Sget_simple_extent_dims(space, dims.data(), nullptr);
        chunk = dims;
        chunk[0] = std::max<hsize_t>(1, dims[0] / 3);
        const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, rank, chunk.data());
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, 9);
        H5Pset_fletcher32(dcpl);
        std::vector<char> data(H5Tget_size(type) * static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
        ASSERT_GE(H5Dread(object, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), 0) << name;
        const hid_t dataset = H5Dcreate2(to, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        ASSERT_GE(H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), 0) << name;
        copy_attributes(object, dataset);
        H5Dclose(dataset);
        H5Pclose(dcpl);
      }
      H5Tclose(type);
      H5Sclose(space);
    }
    H5Oclose(object);
  }
}

/// Rewrites the checkpoint at `path` with every array dataset gzip'd (h5repack -f SHUF -f
/// GZIP=9 -f FLET, done with the HDF5 C API so the test needs no HDF5 tools).
void gzip_checkpoint(const std::string& path) {
  const std::string out = path + ".gz.h5";
  const hid_t from = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(from, 0) << path;
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  const hid_t to = H5Fcreate(out.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  ASSERT_GE(to, 0) << out;
  const hid_t from_root = H5Gopen2(from, "/", H5P_DEFAULT), to_root = H5Gopen2(to, "/", H5P_DEFAULT);
  ASSERT_NO_FATAL_FAILURE(copy_attributes(from_root, to_root));
  ASSERT_NO_FATAL_FAILURE(copy_gzipped(from_root, to_root));
  H5Gclose(to_root);
  H5Gclose(from_root);
  H5Fclose(to);
  H5Fclose(from);
  H5Pclose(fapl);
  fs::rename(out, path);
}

/// How many filters the dataset `name` of the HDF5 file at `path` is stored with (-1: none such).
int filter_count(const std::string& path, const char* name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dataset = H5Dopen2(file, name, H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(dataset);
  const int count = H5Pget_nfilters(dcpl);
  H5Pclose(dcpl);
  H5Dclose(dataset);
  H5Fclose(file);
  return count;
}

/// The bytes of an f32 CPU tensor, for bit-exact comparison.
std::string read_bytes_of(const Tensor& tensor) {
  return std::string(reinterpret_cast<const char*>(tensor.data<float>()), static_cast<size_t>(tensor.numel()) * 4);
}

// A user-defined link class that cannot be followed: lat must refuse it without trying.
hid_t refuse_traversal(const char*, hid_t, const void*, size_t, hid_t, hid_t) { return -1; }
constexpr H5L_type_t kUserLinkClass = static_cast<H5L_type_t>(H5L_TYPE_UD_MIN + 7);

// ---- a tiny run ---------------------------------------------------------------------------

class ResumeTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    std::string text;
    for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog.\n";
    std::ofstream(dir_ / "toy.txt") << text;
    std::ofstream(dir_ / "tiny.yaml") << "model:\n  d_model: 16\n  n_layers: 1\n  n_heads: 2\n  layers: \"gdn\"\n"
                                         "  linear: {chunk_size: 8}\n"
                                         "data:\n  path: "
                                      << (dir_ / "toy.txt").string()
                                      << "\n  block_size: 16\n"
                                         "train:\n  batch_size: 4\n  max_steps: 12\n  warmup: 2\n  lr: 3.0e-3\n"
                                         "  eval_every: 0\n  eval_batches: 1\n  log_every: 4\n  ckpt_every: 4\n"
                                         "  keep_last: 0\n  threads: 1\n  out_dir: "
                                      << (dir_ / "run").string() << "\n";
    log_ = std::tmpfile();
  }
  void TearDown() override {
    std::fclose(log_);
    TempDirTest::TearDown();
  }

  TrainSummary run(std::vector<std::string> overrides = {}) {
    TrainOptions options;
    options.log = log_;
    options.live_progress = false;
    return train(load_config((dir_ / "tiny.yaml").string(), overrides), options);
  }
  fs::path run_dir() const { return dir_ / "run"; }
  std::string ckpt(int64_t step) const { return (run_dir() / checkpoint_file_name(step)).string(); }
  void run_to_step_8() {
    ASSERT_EQ(run({"train.stop_at=8"}).step, 8);
    ASSERT_TRUE(fs::exists(ckpt(8)));
  }
  /// Loads ckpt(8), lets `edit` change it and saves it back (checksums recomputed).
  template <class Edit>
  void rewrite_ckpt8(const Edit& edit) {
    Checkpoint c = load_checkpoint(ckpt(8));
    edit(c);
    save_checkpoint(ckpt(8), c);
  }
  /// Resuming refuses with a ConfigError holding `parts` and changes no file of the run.
  void expect_resume_refused(std::initializer_list<std::string_view> parts,
                             std::source_location where = std::source_location::current()) {
    const RunDirSnapshot before(run_dir());
    expect_error<ConfigError>([&] { run(); }, parts, where);
    before.expect_unchanged(where);
  }

  std::FILE* log_ = nullptr;
};

// ---- links ----------------------------------------------------------------------------------

TEST_F(ResumeTest, SoftLinksAreRefusedByResumeGenerateInfoAndInitFrom) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  ASSERT_NO_FATAL_FAILURE(edit_hdf5(ckpt(8), [](hid_t file) {
    ASSERT_GE(H5Lmove(file, "/model/norm.weight", file, "/moved", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_soft("/moved", file, "/model/norm.weight", H5P_DEFAULT, H5P_DEFAULT), 0);
  }));
  const std::string refusal = "load_checkpoint: '" + ckpt(8) +
                              "': link '/model/norm.weight' is a soft link to '/moved'; lat reads only hard links "
                              "(the data itself in this file)";
  const RunDirSnapshot before(run_dir());
  expect_error([&] { run(); }, {refusal});
  expect_error([&] { load_trained_model(ckpt(8)); }, {refusal});
  expect_error([&] { inspect(ckpt(8), 64); }, {refusal});
  expect_error([&] { run({"init_from=" + ckpt(8), "train.out_dir=" + (dir_ / "finetune").string()}); }, {refusal});
  before.expect_unchanged();
}

TEST_F(ResumeTest, ExternalAndUserDefinedLinksAreRefusedNamingTheLink) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const std::string good = read_bytes(ckpt(8));
  ASSERT_NO_FATAL_FAILURE(edit_hdf5(ckpt(8), [](hid_t file) {
    ASSERT_GE(H5Ldelete(file, "/rng", H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_external("other.h5", "/rng", file, "/rng", H5P_DEFAULT, H5P_DEFAULT), 0);
  }));
  const RunDirSnapshot before(run_dir());
  expect_error([&] { run(); }, {"load_checkpoint: '" + ckpt(8) +
                                "': link '/rng' is an external link to 'other.h5:/rng'; lat reads only hard links"});
  before.expect_unchanged();

  write_bytes(ckpt(8), good);
  H5L_class_t user_class{};
  user_class.version = H5L_LINK_CLASS_T_VERS;
  user_class.id = kUserLinkClass;
  user_class.comment = "test class";
  user_class.trav_func = refuse_traversal;
  ASSERT_GE(H5Lregister(&user_class), 0);
  ASSERT_NO_FATAL_FAILURE(edit_hdf5(ckpt(8), [](hid_t file) {
    ASSERT_GE(H5Ldelete(file, "/data/state", H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_ud(file, "/data/state", kUserLinkClass, "x", 1, H5P_DEFAULT, H5P_DEFAULT), 0);
  }));
  const RunDirSnapshot with_user_link(run_dir());
  expect_error([&] { run(); }, {"load_checkpoint: '" + ckpt(8) + "': link '/data/state' is a user-defined link (class " +
                                std::to_string(static_cast<int>(kUserLinkClass)) + "); lat reads only hard links"});
  with_user_link.expect_unchanged();
  H5Lunregister(kUserLinkClass);
}

TEST_F(ResumeTest, TokenFilesWithASoftLinkAreRefused) {
  const std::string path = this->path("tokens.h5");
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hsize_t n = 4;
  const int32_t ids[4] = {1, 2, 3, 4};
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t dataset = H5Dcreate2(file, "real", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids);
  H5Dclose(dataset);
  H5Sclose(space);
  H5Lcreate_soft("/real", file, "tokens", H5P_DEFAULT, H5P_DEFAULT);
  const hid_t group = H5Gcreate2(file, "group", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(group);
  H5Lcreate_hard(file, "/real", file, "/group/tokens", H5P_DEFAULT, H5P_DEFAULT);
  H5Lcreate_soft("/group", file, "alias", H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(file);
  expect_error([&] { read_h5_tokens(path, "tokens"); },
               {"read_h5_tokens: " + path + ": link '/tokens' is a soft link to '/real'; lat reads only hard links"});
  // A soft link on the way to a dataset is refused before it is followed.
  expect_error([&] { read_h5_tokens(path, "alias/tokens"); },
               {"read_h5_tokens: " + path + ": link '/alias' is a soft link to '/group'; lat reads only hard links"});
  // Hard links only: the same data read under their own names.
  EXPECT_EQ(read_h5_tokens(path, "real"), std::vector<int32_t>({1, 2, 3, 4}));
  EXPECT_EQ(read_h5_tokens(path, "group/tokens"), std::vector<int32_t>({1, 2, 3, 4}));
}

// ---- filters --------------------------------------------------------------------------------

TEST_F(ResumeTest, AGzippedCheckpointResumesExactly) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  fs::copy(run_dir(), dir_ / "plain");
  ASSERT_NO_FATAL_FAILURE(gzip_checkpoint(ckpt(8)));
  EXPECT_EQ(filter_count(ckpt(8), "/model/embeddings.weight"), 3);
  EXPECT_EQ(filter_count(ckpt(8), "/optimizer/embeddings.weight/exp_avg_sq"), 3);
  const Checkpoint plain = load_checkpoint((dir_ / "plain" / checkpoint_file_name(8)).string());
  const Checkpoint gzipped = load_checkpoint(ckpt(8));
  ASSERT_EQ(gzipped.model.size(), plain.model.size());
  for (size_t i = 0; i < plain.model.size(); ++i) {
    EXPECT_EQ(gzipped.model[i].first, plain.model[i].first);
    EXPECT_EQ(read_bytes_of(gzipped.model[i].second), read_bytes_of(plain.model[i].second)) << plain.model[i].first;
  }

  const TrainSummary from_gzip = run();
  const TrainSummary from_plain = run({"train.out_dir=" + (dir_ / "plain").string()});
  EXPECT_EQ(from_gzip.start_step, 8);
  EXPECT_EQ(from_gzip.step, 12);
  const Checkpoint a = load_checkpoint(ckpt(12));
  const Checkpoint b = load_checkpoint((dir_ / "plain" / checkpoint_file_name(12)).string());
  for (size_t i = 0; i < a.model.size(); ++i)
    EXPECT_EQ(read_bytes_of(a.model[i].second), read_bytes_of(b.model[i].second)) << a.model[i].first;
  for (size_t i = 0; i < a.optimizer.params.size(); ++i)
    for (size_t j = 0; j < a.optimizer.params[i].buffers.size(); ++j)
      EXPECT_EQ(read_bytes_of(a.optimizer.params[i].buffers[j].second),
                read_bytes_of(b.optimizer.params[i].buffers[j].second))
          << a.optimizer.params[i].name;
  EXPECT_EQ(from_gzip.val_loss, from_plain.val_loss);
}

// Zero-filled moments deflate about 1000:1, so their data exceed the whole file: valid.
TEST_F(ResumeTest, GzippedDataLargerThanTheirFileAreRead) {
  Checkpoint c;
  c.config_yaml = "model: {}\n";
  c.tokenizer_type = "byte";
  c.model.emplace_back("big", Tensor::zeros({1024, 512}));
  c.optimizer.type = "adamw";
  c.optimizer.step = 1;
  c.optimizer.params.push_back({"big", {{"exp_avg", Tensor::zeros({1024, 512})}}});
  c.rng_state = "0";
  const std::string path = this->path("zeros.h5");
  save_checkpoint(path, c);
  ASSERT_NO_FATAL_FAILURE(gzip_checkpoint(path));
  ASSERT_LT(fs::file_size(path), 1024u * 512 * 4 / 2) << "the test needs data larger than the file";
  const Checkpoint back = load_checkpoint(path);
  ASSERT_EQ(back.model.size(), 1u);
  EXPECT_EQ(read_bytes_of(back.model[0].second), read_bytes_of(c.model[0].second));
  ASSERT_EQ(back.optimizer.params.size(), 1u);
  EXPECT_EQ(read_bytes_of(back.optimizer.params[0].buffers[0].second), read_bytes_of(c.model[0].second));
}

// The fuzz seed that h5repack wrote (tests/fuzz/make_corpus.sh) reads back whole, the same
// values as the checkpoint it was made from.
TEST(ResumeFiles, TheH5repackGzipSeedReadsAsItsSource) {
  const std::string corpus = std::string(LAT_SOURCE_DIR) + "/tests/fuzz/corpus/checkpoint/";
  const Checkpoint plain = load_checkpoint(corpus + "attn_sgd.h5");
  const Checkpoint gzipped = load_checkpoint(corpus + "attn_sgd_gzip.h5");
  EXPECT_EQ(filter_count(corpus + "attn_sgd_gzip.h5", "/model/embeddings.weight"), 3);
  ASSERT_EQ(gzipped.model.size(), plain.model.size());
  for (size_t i = 0; i < plain.model.size(); ++i)
    EXPECT_EQ(read_bytes_of(gzipped.model[i].second), read_bytes_of(plain.model[i].second)) << plain.model[i].first;
  ASSERT_EQ(gzipped.optimizer.params.size(), plain.optimizer.params.size());
  for (size_t i = 0; i < plain.optimizer.params.size(); ++i)
    EXPECT_EQ(read_bytes_of(gzipped.optimizer.params[i].buffers.at(0).second),
              read_bytes_of(plain.optimizer.params[i].buffers.at(0).second))
        << plain.optimizer.params[i].name;
  EXPECT_EQ(gzipped.rng_state, plain.rng_state);
  EXPECT_EQ(gzipped.data.counters, plain.data.counters);
}

/// A token file whose "tokens" dataset (n int8 ids, one chunk) is made by `configure` (its
/// creation properties) and `write` (its data).
template <class Configure, class Write>
std::string token_file(const std::string& path, hsize_t n, const Configure& configure, const Write& write) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &n);
  configure(dcpl);
  const hid_t dataset = H5Dcreate2(file, "tokens", H5T_STD_I8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  write(dataset);
  H5Dclose(dataset);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(file);
  return path;
}

TEST_F(ResumeTest, FiltersOtherThanDeflateShuffleAndFletcherAreRefusedByName) {
  const std::vector<int8_t> ids(100, 7);
  const std::string path = token_file(
      this->path("scaleoffset.h5"), ids.size(), [](hid_t dcpl) { H5Pset_scaleoffset(dcpl, H5Z_SO_INT, 0); },
      [&](hid_t dataset) { H5Dwrite(dataset, H5T_NATIVE_INT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data()); });
  expect_error([&] { read_h5_tokens(path, "tokens"); },
               {"read_h5_tokens: " + path + ": dataset 'tokens': stored with the HDF5 filter 'scaleoffset' (id 6); "
                "lat reads deflate (gzip), shuffle and fletcher32 only"});

  const std::string gzip = token_file(
      this->path("gzip.h5"), ids.size(), [](hid_t dcpl) { H5Pset_deflate(dcpl, 6); },
      [&](hid_t dataset) { H5Dwrite(dataset, H5T_NATIVE_INT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data()); });
  EXPECT_EQ(read_h5_tokens(gzip, "tokens"), std::vector<int32_t>(100, 7));
}

// A chunk written raw (H5Dwrite_chunk) that claims to inflate 16 bytes into a megabyte: more
// than deflate can, refused before HDF5 allocates or decompresses anything.
TEST_F(ResumeTest, AChunkExpandingPastDeflatesRatioIsRefused) {
  const hsize_t n = 1 << 20;
  const std::string path = token_file(
      this->path("bomb.h5"), n, [](hid_t dcpl) { H5Pset_deflate(dcpl, 9); },
      [](hid_t dataset) {
        const hsize_t offset = 0;
        const char fake[16] = {};
        H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, &offset, sizeof fake, fake);
      });
  expect_error([&] { read_h5_tokens(path, "tokens"); },
               {"read_h5_tokens: " + path + ": dataset 'tokens': the chunk at [0] expands from 16 stored bytes to " +
                std::to_string(n) + ", more than 1032x (deflate's largest ratio)"});
}

// ---- consistency of a checkpoint's parts ----------------------------------------------------

TEST_F(ResumeTest, TokensSeenBelowOnePerStepIsRefused) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  ASSERT_NO_FATAL_FAILURE(overwrite_int64_attribute(ckpt(8), "tokens_seen", 0));
  expect_resume_refused({"resume: '" + ckpt(8) +
                         "': attribute tokens_seen: expected >= 8 (at least one token for each of its 8 steps), found 0 "
                         "(a damaged checkpoint; nothing in train.out_dir was changed)"});
}

TEST_F(ResumeTest, DataCountersDisagreeingWithTheCheckpointAreRefused) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const std::string good = read_bytes(ckpt(8));
  struct Case {
    const char* counter;
    int64_t value;
    std::string expected;
  };
  const std::vector<Case> cases = {{"step", 7, "expected 8 (the checkpoint's step), found 7"},
                                   {"batch_size", 5, "expected 4 (train.batch_size in its /config), found 5"},
                                   {"grad_accum", 2, "expected 1 (train.grad_accum in its /config), found 2"},
                                   {"seed", 1, "expected 1337 (train.seed in its /config), found 1"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.counter);
    write_bytes(ckpt(8), good);
    ASSERT_NO_FATAL_FAILURE(overwrite_object_attribute(ckpt(8), "/data", c.counter, c.value));
    expect_resume_refused({"resume: '" + ckpt(8) + "': /data attribute '" + c.counter + "': " + c.expected});
  }
}

// The optimizer may lag the training step (a step skipped for a non-finite gradient norm makes
// no update) but never lead it.
TEST_F(ResumeTest, AnOptimizerStepAheadOfTheTrainingStepIsRefused) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const std::string good = read_bytes(ckpt(8));
  ASSERT_NO_FATAL_FAILURE(overwrite_object_attribute(ckpt(8), "/optimizer", "step", 9));
  expect_resume_refused({"resume: '" + ckpt(8) +
                         "': /optimizer attribute 'step': expected at most the training step 8 (a skipped step makes "
                         "no update), found 9"});

  write_bytes(ckpt(8), good);
  ASSERT_NO_FATAL_FAILURE(overwrite_object_attribute(ckpt(8), "/optimizer", "step", 7));
  EXPECT_EQ(run().step, 12);
  EXPECT_EQ(load_checkpoint(ckpt(12)).optimizer.step, 11);
}

TEST_F(ResumeTest, AMissingOrDamagedRngIsRefusedNamingTheFile) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const std::string good = read_bytes(ckpt(8));
  ASSERT_NO_FATAL_FAILURE(edit_hdf5(ckpt(8), [](hid_t file) { ASSERT_GE(H5Ldelete(file, "/rng", H5P_DEFAULT), 0); }));
  expect_resume_refused({"resume: '" + ckpt(8) +
                         "': /rng: missing; expected the generator state every training checkpoint holds"});

  write_bytes(ckpt(8), good);
  ASSERT_NO_FATAL_FAILURE(rewrite_ckpt8([](Checkpoint& c) { c.rng_state = "not a generator"; }));
  expect_resume_refused({"resume: '" + ckpt(8) +
                         "': /rng: Generator::set_state: the text is not a saved generator state",
                         "(a damaged checkpoint; nothing in train.out_dir was changed)"});
}

TEST_F(ResumeTest, AnExtraOptimizerGroupIsRefused) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  ASSERT_NO_FATAL_FAILURE(rewrite_ckpt8([](Checkpoint& c) { c.optimizer.params.push_back({"ghost.weight", {}}); }));
  expect_resume_refused({"resume: '" + ckpt(8) +
                         "': /optimizer/ghost.weight: optimizer state for no trainable parameter of this model"});
}

TEST_F(ResumeTest, ANegativeExpAvgSqIsRefused) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  std::string name;
  ASSERT_NO_FATAL_FAILURE(rewrite_ckpt8([&](Checkpoint& c) {
    CheckpointParamState& param = c.optimizer.params.at(1);
    name = param.name;
    for (auto& [buffer, tensor] : param.buffers)
      if (buffer == "exp_avg_sq") tensor.data<float>()[3] = -0.5f;
  }));
  expect_resume_refused({"resume: '" + ckpt(8) + "': /optimizer/" + name +
                         "/exp_avg_sq: element 3 is -0.5; expected >= 0 (a running mean of squared gradients)"});
}

TEST_F(ResumeTest, TextTheCheckpointsTokenizerCannotEncodeNamesBothFiles) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  std::ofstream(dir_ / "toy.txt", std::ios::app) << "Zebra\n";
  const RunDirSnapshot before(run_dir());
  expect_error([&] { run(); }, {"resume: '" + ckpt(8) + "': reading data.path '" + (dir_ / "toy.txt").string() +
                                "' with the checkpoint's char tokenizer: ",
                                "Tokenizer::encode: character 'Z'"});
  before.expect_unchanged();
}

// A run already at train.max_steps has nothing to do: config.yaml (which would now say
// max_steps 8), metrics.jsonl, `latest` and the checkpoints stay as they were.
TEST_F(ResumeTest, AResumeWithNothingToDoChangesNoFile) {
  ASSERT_NO_FATAL_FAILURE(run_to_step_8());
  const RunDirSnapshot before(run_dir());
  const TrainSummary s = run({"train.max_steps=8"});
  EXPECT_EQ(s.end_reason, "nothing to do");
  EXPECT_EQ(s.step, 8);
  before.expect_unchanged();
}

}  // namespace
}  // namespace lat
