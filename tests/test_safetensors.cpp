// safetensors (train/files/safetensors.h): f32 round trip bit for bit, bf16 rounding to nearest even
// against a float64 reference, F16 reading, the byte layout (header length, 8-byte aligned data
// section, offsets), metadata and the per-tensor checksums, and bad files (header overrunning
// the file, bad or deeply nested JSON, duplicate tensor names, unknown dtype, shapes whose size
// wraps or of rank above 8, offsets out of range / overlapping / not matching the shape, a
// flipped data bit, a FIFO, a missing tensor), with messages that stay short.
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/expect_error.h"
#include "tests/test_files.h"
#include "train/files/checksum.h"
#include "train/files/safetensors.h"

namespace fs = std::filesystem;

namespace {

using namespace lat::testing;

using SafetensorsTest = TempDirTest;

/// A safetensors file from a header text and a data section, with the 8-byte length prefix.
std::string make_file(const std::string& header, const std::string& data, uint64_t header_len) {
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &header_len, 8);
  return bytes + header + data;
}
std::string make_file(const std::string& header, const std::string& data) {
  return make_file(header, data, header.size());
}

std::vector<float> random_values(size_t n, uint64_t seed) {
  lat::Generator gen(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(gen.normal() * 3.0);
  return v;
}

TEST_F(SafetensorsTest, F32RoundTripIsBitExactAndKeepsOrderShapesAndMetadata) {
  std::vector<std::pair<std::string, lat::Tensor>> tensors = {
      {"embeddings.weight", lat::Tensor::from_vector(random_values(35, 1), {7, 5})},
      {"layers.0.attn.A_log", lat::Tensor::from_vector(random_values(3, 2), {3})},
      {"norm.weight", lat::Tensor::from_vector(random_values(24, 3), {2, 3, 4})},
      {"scalar", lat::Tensor::from_vector(std::vector<float>{-0.0f}, {})},
      {"empty", lat::Tensor::from_vector(std::vector<float>{}, {0, 4})},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"lat_version", "x"}};
  lat::save_safetensors(path("m.safetensors"), tensors, lat::SafetensorsDType::f32, metadata);
  EXPECT_FALSE(fs::exists(path("m.safetensors.tmp")));

  const lat::SafetensorsFile file = lat::load_safetensors(path("m.safetensors"));
  std::map<std::string, std::string> given = file.metadata;
  EXPECT_EQ(given.erase("crc32"), 1u) << "the writer adds the checksums";
  EXPECT_EQ(given, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(file.tensors[i].first, tensors[i].first);
    const lat::Tensor& t = file.at(tensors[i].first);
    EXPECT_EQ(t.shape(), tensors[i].second.shape());
    EXPECT_EQ(t.dtype(), lat::DType::f32);
    const auto a = t.to_vector<float>(), b = tensors[i].second.to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << tensors[i].first;
  }
  EXPECT_TRUE(std::signbit(file.at("scalar").item()));
}

TEST_F(SafetensorsTest, LayoutHasLittleEndianLengthAlignedDataAndContiguousOffsets) {
  // Names of every length mod 8, so the padding takes every value.
  for (int extra = 0; extra < 8; ++extra) {
    std::string name = "w";
    name.append(static_cast<size_t>(extra), 'x');
    const std::vector<float> values = {1.5f, -2.0f, 3.25f};
    lat::save_safetensors(path("a.safetensors"),
                          {{name, lat::Tensor::from_vector(values, {3})},
                           {"b", lat::Tensor::from_vector(std::vector<float>{4.0f, 5.0f}, {1, 2})}});
    const std::string bytes = read_bytes(path("a.safetensors"));
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    EXPECT_EQ((8 + n) % 8, 0u) << "data section not 8-byte aligned for name " << name;
    const std::string header = bytes.substr(8, n);
    const size_t last = header.find_last_not_of(' ');  // padding: fewer than 8 trailing spaces
    EXPECT_EQ(header[last], '}');
    EXPECT_LT(header.size() - last - 1, 8u);
    const nlohmann::json j = nlohmann::json::parse(header);
    EXPECT_EQ(j[name]["dtype"], "F32");
    EXPECT_EQ(j[name]["shape"], nlohmann::json({3}));
    EXPECT_EQ(j[name]["data_offsets"], nlohmann::json({0, 12}));
    EXPECT_EQ(j["b"]["shape"], nlohmann::json({1, 2}));
    EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({12, 20}));
    // The only metadata: the CRC-32 of each tensor's stored bytes, as a JSON object string.
    const float second[2] = {4.0f, 5.0f};
    const nlohmann::json crcs = {{name, lat::crc32_hex(lat::crc32_of(values.data(), 12))},
                                 {"b", lat::crc32_hex(lat::crc32_of(second, 8))}};
    ASSERT_EQ(j["__metadata__"].size(), 1u);
    EXPECT_EQ(nlohmann::json::parse(j["__metadata__"]["crc32"].get<std::string>()), crcs);
    ASSERT_EQ(bytes.size(), 8 + n + 20);
    float first[3];
    std::memcpy(first, bytes.data() + 8 + n, 12);
    EXPECT_EQ(std::vector<float>(first, first + 3), values);
  }
}

TEST_F(SafetensorsTest, Bf16FileRoundTripIsWithinHalfAnUlp) {
  const std::vector<float> values = random_values(1000, 4);
  lat::save_safetensors(path("b.safetensors"), {{"w", lat::Tensor::from_vector(values, {10, 100})}},
                        lat::SafetensorsDType::bf16);
  const std::string bytes = read_bytes(path("b.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(nlohmann::json::parse(bytes.substr(8, n))["w"]["dtype"], "BF16");
  EXPECT_EQ(bytes.size(), 8 + n + 2000);

  const auto back = lat::load_safetensors(path("b.safetensors")).at("w").to_vector<float>();
  ASSERT_EQ(back.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    // bf16 keeps 8 significant bits: the ulp of x in [2^e, 2^(e+1)) is 2^(e-7); rounding to
    // nearest errs by at most half of it.
    const double x = values[i];
    EXPECT_LE(std::fabs(back[i] - x), std::ldexp(1.0, std::ilogb(x) - 8)) << i;
  }
}

TEST_F(SafetensorsTest, ReadsF16) {
  const std::vector<uint16_t> half = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00, 0x8000, 0x3555};
  const std::vector<double> expected = {1.0, -2.0, std::ldexp(1.0, -24), 65504.0,
                                        std::numeric_limits<double>::infinity(), -0.0, 0.333251953125};
  std::string data(half.size() * 2, '\0');
  std::memcpy(data.data(), half.data(), data.size());
  const std::string header = R"({"h":{"dtype":"F16","shape":[7],"data_offsets":[0,14]}})";
  write_bytes(path("h.safetensors"), make_file(header, data));
  const auto got = lat::load_safetensors(path("h.safetensors")).at("h").to_vector<float>();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(static_cast<double>(got[i]), expected[i]) << i;
  EXPECT_TRUE(std::signbit(got[5]));
}

TEST_F(SafetensorsTest, HeaderOverrunningTheFileNamesFileAndLength) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::string p = path("overrun.safetensors");
  write_bytes(p, make_file(header, std::string(4, '\0'), 1000));
  expect_error([&] { lat::load_safetensors(p); }, {p, "header length 1000 overruns the file"});

  write_bytes(p, "abc");
  expect_error([&] { lat::load_safetensors(p); }, {"shorter than the 8-byte header length"});
  expect_error([&] { lat::load_safetensors(path("missing.safetensors")); }, {"missing.safetensors"});
}

TEST_F(SafetensorsTest, BadJsonAndBadEntriesAreNamed) {
  const std::string p = path("bad.safetensors");
  write_bytes(p, make_file("{\"w\": [1,", ""));
  expect_error([&] { lat::load_safetensors(p); }, {"header is not valid JSON"});

  write_bytes(p, make_file(R"([1, 2])", ""));
  expect_error([&] { lat::load_safetensors(p); }, {"expected a JSON object"});

  write_bytes(p, make_file(R"({"w":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')));
  expect_error([&] { lat::load_safetensors(p); }, {"tensor 'w': missing 'data_offsets'"});

  write_bytes(p, make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')));
  expect_error([&] { lat::load_safetensors(p); }, {"F32 [3] needs 12"});

  write_bytes(p, make_file(R"({"__metadata__":{"a":1}})", ""));
  expect_error([&] { lat::load_safetensors(p); }, {"__metadata__: 'a': expected a string"});
}

TEST_F(SafetensorsTest, UnknownDtypeIsNamed) {
  const std::string p = path("dtype.safetensors");
  write_bytes(p, make_file(R"({"layers.0.w":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})", "ab"));
  expect_error([&] { lat::load_safetensors(p); }, {p, "tensor 'layers.0.w': unknown dtype 'Q4_K'"});

  write_bytes(p, make_file(R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')));
  expect_error([&] { lat::load_safetensors(p); }, {"tensor 'ids': unsupported dtype 'I64'"});
}

TEST_F(SafetensorsTest, OffsetsOutOfRangeOverlappingOrWithGapsAreErrors) {
  const std::string p = path("off.safetensors");
  write_bytes(p, make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0')));
  expect_error([&] { lat::load_safetensors(p); },
               {"tensor 'w': data_offsets [0, 8] out of range: the data section holds 4 bytes"});

  write_bytes(p, make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           std::string(12, '\0')));
  expect_error([&] { lat::load_safetensors(p); },
               {p, "tensors 'a' data_offsets [0, 8] and 'b' data_offsets [4, 12] overlap"});

  write_bytes(p, make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')));
  expect_error([&] { lat::load_safetensors(p); }, {"leaving a gap"});

  write_bytes(p, make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, '\0')));
  expect_error([&] { lat::load_safetensors(p); }, {"the tensors cover 4 of the 8 bytes"});
}

TEST_F(SafetensorsTest, MissingTensorIsNamed) {
  lat::save_safetensors(path("m.safetensors"), {{"a", lat::Tensor::zeros({2})}});
  const lat::SafetensorsFile file = lat::load_safetensors(path("m.safetensors"));
  expect_error([&] { file.at("lm_head.weight"); }, {path("m.safetensors"), "no tensor 'lm_head.weight'"});
}

TEST_F(SafetensorsTest, WriterRejectsBadNamesAndLeavesNoFile) {
  const std::string p = path("w.safetensors");
  expect_error([&] { lat::save_safetensors(p, {{"a", lat::Tensor::zeros({1})}, {"a", lat::Tensor::zeros({1})}}); },
               {"got 'a'"});
  expect_error([&] { lat::save_safetensors(p, {{"__metadata__", lat::Tensor::zeros({1})}}); }, {"__metadata__"});
  expect_error([&] { lat::save_safetensors(p, {{"ids", lat::Tensor::arange(3)}}); },
               {"tensor 'ids': expected an f32 or f64 tensor"});
  EXPECT_FALSE(fs::exists(p));
  expect_error([&] { lat::save_safetensors(path("no/such/dir/x.safetensors"), {}); }, {"cannot open"});
  // A directory where the file should go: the rename's own reason, and no temporary left.
  fs::create_directories(path("d.safetensors/inside"));
  expect_error([&] { lat::save_safetensors(path("d.safetensors"), {}); }, {"cannot rename", "Is a directory"});
  EXPECT_FALSE(fs::exists(path("d.safetensors.tmp")));
}

TEST_F(SafetensorsTest, ShapeWhoseSizeWrapsOrRankAbove8IsAnErrorNamingTheTensor) {
  const std::string p = path("wrap.safetensors");
  // (2^62 + 1) * 128 * 4 bytes wraps modulo 2^64 to 512: the offsets agree with the wrapped size.
  write_bytes(p, make_file(R"({"embeddings.weight":{"dtype":"F32","shape":[4611686018427387905,128],)"
                           R"("data_offsets":[0,512]}})",
                           std::string(512, '\0')));
  expect_error([&] { lat::load_safetensors(p); },
               {p, "tensor 'embeddings.weight'", "[4611686018427387905,128]", "overflows int64"});
  // A dim above INT64_MAX alone, and one that overflows only with the element size.
  write_bytes(p, make_file(R"({"w":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})", ""));
  expect_error([&] { lat::load_safetensors(p); }, {"tensor 'w'", "overflows int64"});
  write_bytes(p, make_file(R"({"w":{"dtype":"BF16","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""));
  expect_error([&] { lat::load_safetensors(p); }, {"tensor 'w'", "overflows int64"});
  // Zero dims do not hide an overflowing product of the others.
  write_bytes(p, make_file(R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  expect_error([&] { lat::load_safetensors(p); }, {"tensor 'w'", "overflows int64"});

  write_bytes(p, make_file(R"({"deep":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
                           std::string(4, '\0')));
  expect_error([&] { lat::load_safetensors(p); }, {"tensor 'deep'", "rank 9, expected at most 8"});
  write_bytes(
      p, make_file(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})", std::string(8, '\0')));
  EXPECT_EQ(lat::load_safetensors(p).at("w").numel(), 2);
}

TEST_F(SafetensorsTest, DuplicateTensorNameIsAnError) {
  const std::string p = path("dup.safetensors");
  write_bytes(p, make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           std::string(8, '\0')));
  expect_error([&] { lat::load_safetensors(p); }, {p, "header has the key 'w' twice in one object"});
}

TEST_F(SafetensorsTest, DeeplyNestedHeaderIsAnErrorNotAStackOverflow) {
  // Valid JSON nested 10^6 levels (2 MB), in a shape, in __metadata__ and in an unused key.
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  const std::string p = path("deep.safetensors");
  for (const std::string& header :
       {R"({"w":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})",
        R"({"__metadata__":{"a":)" + deep + R"(},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
        R"({"unused":)" + deep + R"(,"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"}) {
    write_bytes(p, make_file(header, std::string(4, '\0')));
    const std::string message = expect_error([&] { lat::load_safetensors(p); },
                                             {p, "header nests arrays or objects deeper than 64 levels"});
    EXPECT_LT(message.size(), 300u);
  }
}

TEST_F(SafetensorsTest, HugeValuesAreCutInMessages) {
  const std::string p = path("long.safetensors");
  const std::string name(100'000, 'n');
  write_bytes(
      p, make_file(R"({")" + name + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')));
  std::string message = expect_error([&] { lat::load_safetensors(p); }, {"tensor 'nnnn", "...'", "needs 4"});
  EXPECT_LT(message.size(), 400u);

  std::string list = "[1";
  for (int i = 0; i < 100'000; ++i) list += ",1";
  list += "]";
  write_bytes(
      p, make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":)" + list + "}", std::string(4, '\0')));
  message = expect_error([&] { lat::load_safetensors(p); }, {"tensor 'x': expected an object", "[1,1,1,", "..."});
  EXPECT_LT(message.size(), 400u);

  // A string that never ends and a number beyond double: the token the parser quotes is cut too.
  for (const std::string& text :
       {"{\"w\": \"" + std::string(200'000, 'x'), "{\"w\": " + std::string(200'000, '9') + "}"}) {
    write_bytes(p, make_file(text, ""));
    message = expect_error([&] { lat::load_safetensors(p); }, {"header is not valid JSON", "..."});
    EXPECT_LT(message.size(), 400u);
  }
}

TEST_F(SafetensorsTest, FifoIsRefusedWithoutOpening) {
  const std::string p = path("fifo.safetensors");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  expect_error([&] { lat::load_safetensors(p); }, {p, "expected a regular file"});
}

/// The file at `p` with one bit of byte `offset` of the data section of tensor `name` flipped.
void flip_data_bit(const std::string& p, const std::string& name, uint64_t offset) {
  std::string bytes = read_bytes(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const uint64_t at = 8 + n + header[name]["data_offsets"][0].get<uint64_t>() + offset;
  bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
  write_bytes(p, bytes);
}

TEST_F(SafetensorsTest, FlippedDataBitIsAChecksumErrorNamingTheTensor) {
  for (const lat::SafetensorsDType dtype : {lat::SafetensorsDType::f32, lat::SafetensorsDType::bf16}) {
    const std::string p = path("crc.safetensors");
    lat::save_safetensors(p,
                          {{"a", lat::Tensor::from_vector(random_values(6, 5), {2, 3})},
                           {"layers.0.b", lat::Tensor::from_vector(random_values(5, 6), {5})}},
                          dtype);
    ASSERT_NO_THROW(lat::load_safetensors(p));
    flip_data_bit(p, "layers.0.b", 3);
    expect_error([&] { lat::load_safetensors(p); },
                 {p, "tensor 'layers.0.b': checksum mismatch: stored crc32", "the file is damaged"});
  }
}

TEST_F(SafetensorsTest, ChecksumsMustNameExactlyTheTensors) {
  const std::string p = path("c.safetensors");
  const std::string w = R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  const std::string data(4, '\0');  // 0.0f, CRC-32 2144df1c
  auto with_crc = [&](const std::string& crc) {
    write_bytes(p, make_file(R"({"__metadata__":{"crc32":)" + nlohmann::json(crc).dump() + "}," + w + "}", data));
  };
  with_crc(R"({"w":"2144df1c"})");
  EXPECT_EQ(lat::load_safetensors(p).at("w").item(), 0.0f);
  with_crc(R"({})");
  expect_error([&] { lat::load_safetensors(p); }, {p, "__metadata__ 'crc32': no checksum for tensor 'w'"});
  with_crc(R"({"w":"2144df1c","v":"00000000"})");
  expect_error([&] { lat::load_safetensors(p); }, {"a checksum for tensor 'v', which the file does not hold"});
  with_crc(R"({"w":"2144DF1C"})");
  expect_error([&] { lat::load_safetensors(p); }, {"tensor 'w': expected 8 lower-case hex digits, got \"2144DF1C\""});
  with_crc(R"({"w":"2144df1c","w":"2144df1c"})");
  expect_error([&] { lat::load_safetensors(p); }, {"__metadata__ 'crc32' has the key 'w' twice"});
  with_crc(R"(["w"])");
  expect_error([&] { lat::load_safetensors(p); }, {"__metadata__ 'crc32': expected a JSON object"});
  with_crc(R"({"w":"00000000"})");
  expect_error([&] { lat::load_safetensors(p); }, {"tensor 'w': checksum mismatch"});
  // Other tools' files carry no checksums and are read as they are.
  write_bytes(p, make_file("{" + w + "}", data));
  EXPECT_EQ(lat::load_safetensors(p).metadata.count("crc32"), 0u);
}

TEST_F(SafetensorsTest, RewritingAFileWithItsMetadataWritesFreshChecksums) {
  const std::string p = path("r.safetensors");
  lat::save_safetensors(p, {{"w", lat::Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2})}},
                        lat::SafetensorsDType::f32, {{"format", "pt"}});
  const lat::SafetensorsFile file = lat::load_safetensors(p);
  lat::save_safetensors(p, {{"w", lat::Tensor::from_vector(std::vector<float>{3.0f}, {1})}},
                        lat::SafetensorsDType::f32, file.metadata);
  const lat::SafetensorsFile back = lat::load_safetensors(p);
  EXPECT_EQ(back.at("w").to_vector<float>(), std::vector<float>{3.0f});
  const float three = 3.0f;
  EXPECT_EQ(nlohmann::json::parse(back.metadata.at("crc32")),
            nlohmann::json({{"w", lat::crc32_hex(lat::crc32_of(&three, 4))}}));
  EXPECT_EQ(back.metadata.at("format"), "pt");
}

}  // namespace
