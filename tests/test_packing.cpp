// Document packing (data.doc_separator, data.packing): the index of document starts, the
// boundaries (Batch::cu_seqlens) and ignored targets of random and sequential windows against
// a brute-force oracle, a batch as a pure function of its key split across ranks, load_data
// on text and token files, and the config keys with their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <source_location>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "data/dataset.h"
#include "data/documents.h"
#include "data/loader.h"
#include "lat/lat.h"
#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/config/config.h"
#include "train/config/data_options.h"

namespace lat {
namespace {

using testing::expect_error;

constexpr int32_t kSep = 7;  // the separator id of the token streams below

/// Positions p in (0, n) whose previous token is `separator`: the document starts of a
/// one-token separator, found without DocumentIndex.
std::vector<int64_t> oracle_starts(const std::vector<int32_t>& tokens, int32_t separator) {
  std::vector<int64_t> starts;
  for (size_t p = 1; p < tokens.size(); ++p)
    if (tokens[p - 1] == separator) starts.push_back(static_cast<int64_t>(p));
  return starts;
}

/// The document each position belongs to (0, 1, ...), from its starts.
std::vector<int64_t> document_of(int64_t n, const std::vector<int64_t>& starts) {
  std::vector<int64_t> doc(static_cast<size_t>(n), 0);
  size_t next = 0;
  for (int64_t p = 0; p < n; ++p) {
    if (next < starts.size() && starts[next] == p) ++next;
    doc[p] = static_cast<int64_t>(next);
  }
  return doc;
}

bool is_start(const std::vector<int64_t>& starts, int64_t p) {
  return std::binary_search(starts.begin(), starts.end(), p);
}

/// n tokens: 100 + offset, except a separator with probability about 1/6, in runs of up to
/// three (empty documents), from a fixed linear congruential stream.
std::vector<int32_t> random_documents(int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  uint64_t state = 12345;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    tokens[i] = (state >> 33) % 6 == 0 ? kSep : static_cast<int32_t>(100 + i);
  }
  return tokens;
}

std::vector<int64_t> values(const Tensor& t) { return t.to_vector<int64_t>(); }

std::vector<int64_t> span_values(std::span<const int64_t> s) { return {s.begin(), s.end()}; }

// ---- the index of document starts ------------------------------------------------------------

TEST(DocumentIndex, FindsTheTokenAfterEachSeparator) {
  // Documents: [5 6 sep] [8 sep] [sep] [9 10 sep]; a separator at the very end starts nothing.
  const DocumentIndex one({5, 6, kSep, 8, kSep, kSep, 9, 10, kSep}, {kSep});
  EXPECT_EQ(one.num_starts(), 3);
  EXPECT_EQ(span_values(one.starts_in(0, 9)), (std::vector<int64_t>{3, 5, 6}));
  EXPECT_EQ(span_values(one.starts_in(3, 5)), (std::vector<int64_t>{5})) << "begin excluded, end included";
  EXPECT_EQ(span_values(one.starts_in(2, 3)), (std::vector<int64_t>{3}));
  EXPECT_TRUE(one.starts_in(6, 8).empty());
  // Two-token separator, matched left to right without overlap: in "1 s s s 2 s s 3 s s" the
  // third s starts the document "s 2 s s", and the last match ends the stream.
  const DocumentIndex two({1, kSep, kSep, kSep, 2, kSep, kSep, 3, kSep, kSep}, {kSep, kSep});
  EXPECT_EQ(span_values(two.starts_in(0, 10)), (std::vector<int64_t>{3, 7}));
  expect_error([] { DocumentIndex({1, 2}, {}); }, {"data.doc_separator", "at least one token"});
}

// ---- random windows ------------------------------------------------------------------------

TEST(PackedBatchLoader, CutsTheSameWindowsAtEveryDocumentStart) {
  const std::vector<int32_t> tokens = random_documents(3000);
  const int64_t T = 16;
  const Dataset plain(tokens, 0.2, T), packed(tokens, 0.2, T, {kSep});
  const BatchLoader unpacked_loader(plain, 9), loader(packed, 9);
  EXPECT_EQ(unpacked_loader.sampler(), "splitmix64-windows-v1");
  EXPECT_EQ(loader.sampler(), "splitmix64-packed-v1");
  const std::vector<int64_t> starts = oracle_starts(tokens, kSep);
  const std::vector<int64_t> doc = document_of(static_cast<int64_t>(tokens.size()), starts);
  int64_t interior_boundaries = 0, ignored = 0;
  for (Split split : {Split::train, Split::val}) {
    for (int64_t step = 0; step < 12; ++step) {
      const Batch a = unpacked_loader.batch(split, step, 1, {0, 8});
      const Batch b = loader.batch(split, step, 1, {0, 8});
      EXPECT_FALSE(a.cu_seqlens.defined()) << "no boundaries without packing";
      ASSERT_TRUE(b.cu_seqlens.defined());
      EXPECT_EQ(b.cu_seqlens.dtype(), DType::i64);
      EXPECT_EQ(values(b.inputs), values(a.inputs)) << "the same windows";
      std::vector<int64_t> cu = {0}, targets = values(a.targets);
      int64_t tokens_left = 8 * T;
      for (int64_t r = 0; r < 8; ++r) {
        const int64_t first = packed.split_begin(split) + loader.window_start(split, step, 1, r);
        for (int64_t t = 0; t < T; ++t) {
          if (t > 0 && is_start(starts, first + t)) cu.push_back(r * T + t);
          if (is_start(starts, first + t + 1)) {
            targets[r * T + t] = kIgnoreIndex;
            --tokens_left;
          }
        }
        cu.push_back((r + 1) * T);
      }
      ASSERT_EQ(values(b.cu_seqlens), cu) << split_name(split) << " step " << step;
      EXPECT_EQ(b.cu_seqlens.shape(), (Shape{static_cast<int64_t>(cu.size())}));
      EXPECT_EQ(values(b.targets), targets);
      EXPECT_EQ(b.tokens, tokens_left);
      interior_boundaries += static_cast<int64_t>(cu.size()) - 9;
      ignored += 8 * T - tokens_left;
      // Every sequence lies in one document, and every real target is in its input's document.
      const std::vector<int64_t> x = values(b.inputs), y = values(b.targets);
      for (size_t i = 0; i + 1 < cu.size(); ++i) {
        const int64_t r = cu[i] / T, first = packed.split_begin(split) + loader.window_start(split, step, 1, r);
        for (int64_t j = cu[i]; j < cu[i + 1]; ++j)
          EXPECT_EQ(doc[first + j - r * T], doc[first + cu[i] - r * T]) << "sequence " << i;
      }
      for (int64_t j = 0; j < 8 * T; ++j) {
        if (y[j] == kIgnoreIndex) continue;
        const int64_t first = packed.split_begin(split) + loader.window_start(split, step, 1, j / T);
        const int64_t p = first + j % T;
        EXPECT_EQ(doc[p], doc[p + 1]) << "the target of position " << p << " crosses a boundary";
      }
    }
  }
  EXPECT_GT(interior_boundaries, 100) << "the corpus has many short documents";
  EXPECT_GT(ignored, 100);
}

TEST(PackedBatchLoader, BatchIsAPureFunctionOfItsKeyAndRankSharesConcatenate) {
  const std::vector<int32_t> tokens = random_documents(4000);
  const int64_t T = 8;
  const Dataset packed(tokens, 0.1, T, {kSep});
  const BatchLoader loader(packed, 5), same_seed(packed, 5);
  const Batch full = loader.batch(Split::train, 11, 2, {0, 12});
  loader.batch(Split::train, 3, 0, {0, 12});  // history does not matter
  for (const Batch& again :
       {loader.batch(Split::train, 11, 2, {0, 12}), same_seed.batch(Split::train, 11, 2, {0, 12})}) {
    EXPECT_EQ(values(again.inputs), values(full.inputs));
    EXPECT_EQ(values(again.targets), values(full.targets));
    EXPECT_EQ(values(again.cu_seqlens), values(full.cu_seqlens));
    EXPECT_EQ(again.tokens, full.tokens);
  }
  EXPECT_NE(values(loader.batch(Split::train, 12, 2, {0, 12}).cu_seqlens), values(full.cu_seqlens));
  EXPECT_NE(values(loader.batch(Split::train, 11, 1, {0, 12}).inputs), values(full.inputs));
  for (int world : {1, 2, 3, 4, 6}) {
    std::vector<int64_t> inputs, targets, cu = {0};
    int64_t tokens_sum = 0;
    for (int rank = 0; rank < world; ++rank) {
      const RowRange rows = rank_rows(12, rank, world);
      const Batch share = loader.batch(Split::train, 11, 2, rows);
      for (int64_t v : values(share.inputs)) inputs.push_back(v);
      for (int64_t v : values(share.targets)) targets.push_back(v);
      const std::vector<int64_t> share_cu = values(share.cu_seqlens);
      EXPECT_EQ(share_cu.front(), 0);
      EXPECT_EQ(share_cu.back(), (rows.end - rows.begin) * T) << "offsets over the share's own rows";
      for (size_t i = 1; i < share_cu.size(); ++i) cu.push_back(rows.begin * T + share_cu[i]);
      tokens_sum += share.tokens;
    }
    EXPECT_EQ(inputs, values(full.inputs)) << world << " ranks";
    EXPECT_EQ(targets, values(full.targets)) << world << " ranks";
    EXPECT_EQ(cu, values(full.cu_seqlens)) << world << " ranks";
    EXPECT_EQ(tokens_sum, full.tokens) << world << " ranks";
  }
}

// ---- sequential val windows --------------------------------------------------------------------

TEST(PackedSequentialEval, BoundariesAtWindowEdgesEmptyDocumentsAndLongDocuments) {
  // 100 tokens, val = [50, 100), T = 8: windows start at 50, 58, 66, 74, 82, 90, 98 (the last
  // padded). Separators: 57 (the last token of window 0, so the document after it starts
  // window 1), 66 (the first token of window 2: a one-token sequence), 70, 71, 72 (two empty
  // documents); then one document of 27 tokens, 73 .. 99, across four windows.
  std::vector<int32_t> tokens(100);
  for (int32_t i = 0; i < 100; ++i) tokens[i] = 100 + i;
  for (int i : {20, 57, 66, 70, 71, 72}) tokens[i] = kSep;
  const Dataset packed(tokens, 0.5, 8, {kSep});
  const SequentialEval eval(packed, 7);
  ASSERT_EQ(eval.num_windows(), 7);
  ASSERT_EQ(eval.num_batches(), 1);
  const Batch b = eval.batch(0);
  EXPECT_EQ(values(b.cu_seqlens), (std::vector<int64_t>{0, 8, 16, 17, 21, 22, 23, 24, 32, 40, 48, 56}));
  // Ignored: before 58 (row 0, t 7), 67 (row 2, t 0), 71, 72, 73 (row 2, t 4 .. 6); the last
  // real token 99 (row 6, t 1) and the padding.
  const std::vector<int64_t> y = values(b.targets), x = values(b.inputs);
  std::vector<int64_t> ignored;
  for (int64_t j = 0; j < 56; ++j) {
    if (y[j] == kIgnoreIndex)
      ignored.push_back(j);
    else
      EXPECT_EQ(y[j], tokens[50 + j + 1]) << "window position " << j;
  }
  EXPECT_EQ(ignored, (std::vector<int64_t>{7, 16, 20, 21, 22, 49, 50, 51, 52, 53, 54, 55}));
  EXPECT_EQ(x[7], kSep) << "the separator is the last input of its document";
  EXPECT_EQ(y[6], kSep) << "and is predicted from inside it";
  EXPECT_EQ(b.tokens, 44);
  EXPECT_EQ(eval.num_targets(), 44) << "49 val targets less the 5 document starts after the first val token";
}

// ---- load_data ------------------------------------------------------------------------------

using PackingFiles = testing::TempDirTest;

/// Offsets (in `text`, which is the token stream of the byte tokenizer and, for ASCII text,
/// of the char tokenizer) right after each non-overlapping `separator`, as str.split cuts.
std::vector<int64_t> split_starts(const std::string& text, const std::string& separator) {
  std::vector<int64_t> starts;
  for (size_t at = text.find(separator); at != std::string::npos; at = text.find(separator, at + separator.size()))
    if (at + separator.size() < text.size()) starts.push_back(static_cast<int64_t>(at + separator.size()));
  return starts;
}

TEST_F(PackingFiles, TextDocumentsSplitAtTheSeparatorString) {
  std::string text;
  for (int i = 0; i < 30; ++i)
    text += "doc " + std::to_string(i) + (i % 4 == 0 ? "\n\n\n" : i % 5 == 0 ? "\n\n\n\n" : "\n\n");
  const std::string file = write("docs.txt", text);
  const std::vector<int64_t> expected = split_starts(text, "\n\n");
  for (const char* tokenizer : {"char", "byte"}) {
    const LoadedData data = load_data(
        {.path = file, .tokenizer = tokenizer, .block_size = 8, .doc_separator = "\n\n", .packing = true});
    ASSERT_TRUE(data.dataset.documents().has_value()) << tokenizer;
    EXPECT_EQ(span_values(data.dataset.documents()->starts_in(0, data.dataset.size())), expected) << tokenizer;
    EXPECT_EQ(BatchLoader(data.dataset, 1).sampler(), "splitmix64-packed-v1");
  }
  // A separator without packing changes nothing.
  const LoadedData plain = load_data({.path = file, .block_size = 8, .doc_separator = "\n\n"});
  EXPECT_FALSE(plain.dataset.documents().has_value());
  EXPECT_EQ(BatchLoader(plain.dataset, 1).sampler(), "splitmix64-windows-v1");
  EXPECT_FALSE(BatchLoader(plain.dataset, 1).train_batch(0, 0, 2).cu_seqlens.defined());
}

TEST_F(PackingFiles, TokenDocumentsSplitAtTheSeparatorId) {
  std::vector<uint16_t> ids;
  for (int i = 0; i < 60; ++i) ids.push_back(i % 7 == 6 ? 50 : static_cast<uint16_t>(i));
  const std::string file = write("docs.bin", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 2));
  const LoadedData data = load_data({.path = file, .block_size = 4, .doc_separator = int64_t{50}, .packing = true});
  const std::vector<int32_t> as_int(ids.begin(), ids.end());
  EXPECT_EQ(span_values(data.dataset.documents()->starts_in(0, 60)), oracle_starts(as_int, 50));
}

TEST_F(PackingFiles, SeparatorErrorsNameTheKey) {
  std::vector<uint16_t> ids(80, 3);
  const std::string bin = write("docs.bin", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 2));
  // The format found by extension and by content.
  expect_error([&] { load_data({.path = bin, .block_size = 4, .doc_separator = "\n\n"}); },
               {"data.doc_separator", "bin data takes the token id", "got the string \"\\n\\n\"", bin});
  const std::string text = write("corpus", std::string(80, 'a'));
  expect_error([&] { load_data({.path = text, .block_size = 4, .doc_separator = int64_t{3}, .packing = true}); },
               {"data.doc_separator", "text data takes the string", "got the token id 3", text});
  expect_error([&] { load_data({.path = text, .block_size = 4, .packing = true}); },
               {"data.packing", "needs data.doc_separator"});
  // A separator that never ends a document is refused rather than packing nothing.
  expect_error([&] { load_data({.path = bin, .block_size = 4, .doc_separator = int64_t{50}, .packing = true}); },
               {"data.doc_separator 50 separates no two documents of", bin});
  expect_error(
      [&] { load_data({.path = text, .tokenizer = "byte", .block_size = 4, .doc_separator = "\\n", .packing = true}); },
      {"data.doc_separator \"\\\\n\" separates no two documents"});
  expect_error([&] { load_data({.path = text, .block_size = 4, .doc_separator = "\n\n", .packing = true}); },
               {"data.doc_separator \"\\n\\n\" does not occur in", text, "char tokenizer cannot encode it"});
}

// A split whose tokens after the first are all the separator has nothing to predict: refused
// at load, naming the file and the split, instead of a nan loss at the first step.
TEST_F(PackingFiles, ASplitOfSeparatorsOnlyHasNoTargetsAndIsRefused) {
  const std::vector<uint16_t> separators(80, 50);
  const std::string bin = write("seps.bin",
                                std::string(reinterpret_cast<const char*>(separators.data()), separators.size() * 2));
  const std::string expected = "load_data: " + bin +
                               ": no targets in the train split (72 tokens): every token after "
                               "its first is data.doc_separator 50, so each document ends where it starts";
  expect_error([&] { load_data({.path = bin, .block_size = 4, .doc_separator = int64_t{50}, .packing = true}); },
               {expected});
  // Separators only in the val split (the last 8 of 80 tokens): the val split is named.
  std::vector<uint16_t> ids(80, 3);
  for (size_t i = 70; i < ids.size(); ++i) ids[i] = 50;
  const std::string tail = write("tail.bin", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 2));
  expect_error([&] { load_data({.path = tail, .block_size = 4, .doc_separator = int64_t{50}, .packing = true}); },
               {"load_data: " + tail + ": no targets in the val split (8 tokens)"});
  // One token that is not a separator in the val split gives it a target, and the load succeeds.
  ids[78] = 3;
  const std::string one = write("one.bin", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 2));
  const LoadedData data = load_data({.path = one, .block_size = 4, .doc_separator = int64_t{50}, .packing = true});
  // val = tokens [72, 80) = 50 x6, 3, 50: token 79 (50) follows 78 (3) inside a document.
  EXPECT_EQ(data.dataset.num_targets(Split::val), 1);
  // train = [0, 72): 3 x70 then 50 50; documents start at 71 and 72, so of the 71 targets
  // (tokens 1..71) token 71 is none.
  EXPECT_EQ(data.dataset.num_targets(Split::train), 70);
  EXPECT_EQ(data.dataset.documents()->num_documents(), 9);  // starts at 71..78, plus the first
}

// ---- config -------------------------------------------------------------------------------

Config parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return parse_config(yaml, "run.yaml", overrides);
}

void expect_config_error(const std::string& yaml, const std::string& expected,
                         std::source_location where = std::source_location::current()) {
  const std::string message = expect_error<ConfigError>([&] { parse(yaml); }, {expected}, where);
  EXPECT_EQ(message, expected) << "at line " << where.line();
}

TEST(PackingConfig, KeysDefaultsAndRoundTrip) {
  const Config defaults = parse("data.path: corpus.txt\n");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(defaults.data.doc_separator));
  EXPECT_FALSE(defaults.data.packing);
  const Config text = parse("data:\n  path: corpus.txt\n  doc_separator: \"\\n\\n\"\n  packing: true\n");
  EXPECT_EQ(std::get<std::string>(text.data.doc_separator), "\n\n");
  EXPECT_TRUE(text.data.packing);
  const DataOptions options = data_options(text);
  EXPECT_EQ(std::get<std::string>(options.doc_separator), "\n\n");
  EXPECT_TRUE(options.packing);
  const Config ids = parse("data:\n  path: tokens.bin\n  doc_separator: 50256\n  packing: true\n");
  EXPECT_EQ(std::get<int64_t>(ids.data.doc_separator), 50256);
  for (const Config& c : {defaults, text, ids}) {
    const std::string yaml = to_yaml(c);
    EXPECT_EQ(parse_config(yaml, "resolved.yaml"), c) << yaml;
  }
  EXPECT_NE(to_yaml(text).find("doc_separator: \"\\n\\n\""), std::string::npos) << to_yaml(text);
  EXPECT_NE(to_yaml(ids).find("doc_separator: 50256"), std::string::npos);
  EXPECT_NE(to_yaml(defaults).find("doc_separator: ~"), std::string::npos) << to_yaml(defaults);
  // A quoted number is a string; an override parses its value as YAML.
  EXPECT_EQ(std::get<std::string>(parse("data.path: corpus.txt\ndata.doc_separator: \"50256\"\ndata.packing: true\n").data.doc_separator),
            "50256");
  EXPECT_EQ(std::get<int64_t>(parse("data.path: t.bin\n", {"data.doc_separator=0", "data.packing=true"}).data.doc_separator), 0);
  // Packing is part of the data, which may not change on resume.
  EXPECT_EQ(resume_incompatible_keys(defaults, text), (std::vector<std::string>{"data.doc_separator", "data.packing"}));
}

TEST(PackingConfig, ErrorsNameTheKeyAndTheLine) {
  expect_config_error("data.path: corpus.txt\ndata.doc_separator: \"\\n\\n\"\n",
                      "data.doc_separator: splits documents only with data.packing: true: set it, or remove "
                      "data.doc_separator (run.yaml:2)");
  expect_config_error("data.path: corpus.txt\ndata.packing: true\n",
                      "data.packing: needs data.doc_separator, the string (text) or token id (bin, h5) that ends "
                      "each document (run.yaml:2)");
  expect_error<ConfigError>([] { parse("data.path: corpus.txt\n", {"data.packing=true"}); },
                            {"data.packing: needs data.doc_separator", "(--set data.packing)"});
  expect_config_error("data.path: tokens.bin\ndata.doc_separator: \"\\n\\n\"\n",
                      "data.doc_separator: bin data takes the token id that ends each document (an unquoted int), "
                      "got the string \"\\n\\n\" (run.yaml:2)");
  expect_config_error("data.path: tokens.bin\ndata.doc_separator: \"50256\"\n",
                      "data.doc_separator: bin data takes the token id that ends each document (an unquoted int), "
                      "got the string \"50256\" (run.yaml:2)");
  expect_config_error("data.path: corpus\ndata.format: h5\ndata.doc_separator: eos\n",
                      "data.doc_separator: h5 data takes the token id that ends each document (an unquoted int), "
                      "got the string \"eos\" (run.yaml:3)");
  expect_config_error("data.path: corpus.txt\ndata.doc_separator: 0\n",
                      "data.doc_separator: text data takes the string that ends each document (e.g. \"\\n\\n\"), got "
                      "the token id 0 (quote it to mean the text) (run.yaml:2)");
  expect_config_error("data.path: t.bin\ndata.doc_separator: -1\n",
                      "data.doc_separator: expected a token id in [0, 2147483647], got -1 (run.yaml:2)");
  expect_config_error("data.path: corpus\ndata.doc_separator: \"\"\n",
                      "data.doc_separator: expected a non-empty separator string, got \"\" (run.yaml:2)");
  for (const char* value : {"true", "1.5", "65.0", "no"})
    expect_error<ConfigError>([&] { parse(std::string("data.path: t.bin\ndata.doc_separator: ") + value + "\n"); },
                              {"data.doc_separator: expected a quoted string or an int token id", "(run.yaml:2)"});
  EXPECT_EQ(std::get<std::string>(parse("data.path: c.txt\ndata.doc_separator: \"true\"\ndata.packing: true\n").data.doc_separator), "true");
  expect_config_error("data.path: corpus.txt\ndata.doc_separator: [1, 2]\n",
                      "data.doc_separator: expected a string or a token id, got a list (run.yaml:2)");
  expect_config_error("data:\n  task: mqar\n  doc_separator: 0\n  packing: true\n",
                      "data.packing: packs the documents of data.path, but data.task mqar (run.yaml:2) generates "
                      "its own sequences, one per row: remove one of them (run.yaml:4)");
}

}  // namespace
}  // namespace lat
