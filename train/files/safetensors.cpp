// safetensors writer and reader (format in safetensors.h). The whole header is validated
// before any tensor is read, so a bad file fails with one message naming it.
#include "train/files/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "autograd/cpu/bf16.h"
#include "data/regular_file.h"
#include "lat/error.h"
#include "train/files/atomic_file.h"
#include "train/files/checksum.h"
#include "train/files/json_file.h"

namespace lat {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; lat reads and writes it as host memory");

// The reference implementation refuses larger headers too (100 MB): a bigger length is a
// corrupt file, not a model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Highest tensor rank read (lat's tensors have rank <= 2; the bound keeps shapes small).
constexpr size_t kMaxRank = 8;

const nlohmann::json kNull;

/// Bytes per element of a dtype name we can read; 0 for one we cannot.
size_t element_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

/// One validated header entry.
struct Entry {
  std::string name;
  std::string dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

/// Every dtype the format defines, to tell "unsupported" from "unknown" in errors.
bool is_safetensors_dtype(const std::string& dtype) {
  static const std::set<std::string> known = {"BOOL", "U8",  "I8",  "I16", "U16",    "F16",   "BF16",
                                              "I32",  "U32", "F32", "F64", "I64",    "U64",   "F8_E4M3",
                                              "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};
  return known.count(dtype) != 0;
}

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j) {
  auto bad = [&](const std::string& what) {
    throw Error("load_safetensors: '" + path + "': tensor '" + excerpt(name) + "': " + what);
  };
  if (!j.is_object()) bad("expected an object {dtype, shape, data_offsets}, got " + json_excerpt(j));
  Entry e;
  e.name = name;
  if (!j.contains("dtype") || !j["dtype"].is_string()) bad("missing string 'dtype'");
  e.dtype = j["dtype"].get<std::string>();
  if (element_bytes(e.dtype) == 0) {
    if (is_safetensors_dtype(e.dtype)) bad("unsupported dtype '" + e.dtype + "' (lat reads F32, BF16, F16)");
    bad("unknown dtype '" + excerpt(e.dtype) + "'");
  }
  if (!j.contains("shape") || !j["shape"].is_array()) bad("missing array 'shape'");
  const nlohmann::json& shape = j["shape"];
  if (shape.size() > kMaxRank)
    bad("shape " + json_excerpt(shape) + " has rank " + std::to_string(shape.size()) + ", expected at most " +
        std::to_string(kMaxRank));
  // The size in bytes, checked for overflow: a count that wrapped would pass the offsets
  // check below with a small allocation for a huge shape. Zero dims count as 1 here, so no
  // product of dims (strides included) can overflow once the tensor exists.
  uint64_t bytes = element_bytes(e.dtype);
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) bad("shape: expected non-negative integers, got " + json_excerpt(shape));
    const uint64_t dim = d.get<uint64_t>();
    if (__builtin_mul_overflow(bytes, std::max<uint64_t>(dim, 1), &bytes) ||
        bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad("shape " + json_excerpt(shape) + ": the element count overflows int64");
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto& off = j.contains("data_offsets") ? j["data_offsets"] : kNull;
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    bad("missing 'data_offsets' [begin, end] of non-negative integers");
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin) bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]: end before begin");
  const uint64_t expected = static_cast<uint64_t>(shape_numel(e.shape)) * element_bytes(e.dtype);
  if (e.end - e.begin != expected)
    bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] hold " +
        std::to_string(e.end - e.begin) + " bytes, but " + e.dtype + " " + shape_str(e.shape) + " needs " +
        std::to_string(expected));
  return e;
}

/// "[begin, end]" of `e`'s data_offsets.
std::string offsets_text(const Entry& e) { return "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]"; }

/// The per-tensor checksums of __metadata__ 'crc32' (a JSON object string {name: 8 hex
/// digits}), checked to name exactly the tensors of `entries`.
std::map<std::string, std::string> parse_checksums(const std::string& where, const std::string& text,
                                                   const std::vector<Entry>& entries) {
  const std::string subject = where + "__metadata__ '" + kChecksumMetadataKey + "'";
  const nlohmann::json j = parse_json_text(text, subject);
  if (!j.is_object()) throw Error(subject + ": expected a JSON object {tensor name: crc32}, got " + json_excerpt(j));
  std::map<std::string, std::string> crcs;
  for (const auto& [name, crc] : j.items()) {
    const bool hex = crc.is_string() && crc.get_ref<const std::string&>().size() == 8 &&
                     crc.get_ref<const std::string&>().find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!hex)
      throw Error(subject + ": tensor '" + excerpt(name) + "': expected 8 lower-case hex digits, got " +
                  json_excerpt(crc));
    crcs[name] = crc.get<std::string>();
  }
  for (const Entry& e : entries)
    if (!crcs.count(e.name)) throw Error(subject + ": no checksum for tensor '" + excerpt(e.name) + "'");
  if (crcs.size() != entries.size())
    for (const auto& [name, crc] : crcs)
      // An init-capture: clang before 16 cannot capture a structured binding.
      if (std::none_of(entries.begin(), entries.end(), [&name = name](const Entry& e) { return e.name == name; }))
        throw Error(subject + ": a checksum for tensor '" + excerpt(name) + "', which the file does not hold");
  return crcs;
}

/// Converts `count` elements of `dtype` at `src` into f32 at `dst`.
void to_f32(const std::string& dtype, const char* src, float* dst, int64_t count) {
  if (dtype == "F32") {
    std::memcpy(dst, src, static_cast<size_t>(count) * 4);
    return;
  }
  const bool bf16 = dtype == "BF16";
#pragma omp parallel for if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    dst[i] = bf16 ? cpu::bf16_to_float(bits) : f16_to_float(bits);
  }
}

}  // namespace

SafetensorsDType parse_safetensors_dtype(const std::string& name) {
  if (name == "f32") return SafetensorsDType::f32;
  if (name == "bf16") return SafetensorsDType::bf16;
  throw Error("safetensors: dtype: expected f32 or bf16, got '" + name + "'");
}


float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  return sign ? -magnitude : magnitude;
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw Error("safetensors: '" + path + "': no tensor '" + name + "'");
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      SafetensorsDType dtype, const std::map<std::string, std::string>& metadata) {
  const char* where = "save_safetensors: '";
  const size_t elem = dtype == SafetensorsDType::f32 ? 4 : 2;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = nullptr;  // first, as in the format's examples; filled once the checksums are known
  // Each tensor's bytes as stored: the f32 host copy itself, or its bf16 rounding. The
  // pointers stay valid as the vectors grow: moving a Tensor or a std::vector keeps its buffer.
  std::vector<Tensor> host;
  std::vector<std::vector<uint16_t>> half;
  std::vector<std::pair<const char*, size_t>> stored;
  nlohmann::ordered_json crcs = nlohmann::ordered_json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LAT_CHECK(!name.empty() && name != "__metadata__" && names.insert(name).second,
              where << path << "': tensor name: expected a unique non-empty name other than __metadata__, got '"
                    << name << "'");
    LAT_CHECK(t.defined() && (t.dtype() == DType::f32 || t.dtype() == DType::f64),
              where << path << "': tensor '" << name << "': expected an f32 or f64 tensor");
    Tensor h = t.to(Device::cpu());
    if (h.dtype() != DType::f32) h = h.to(DType::f32);
    const int64_t count = h.numel();
    const float* data = h.data<float>();
    host.push_back(h);
    if (dtype == SafetensorsDType::f32) {
      stored.emplace_back(reinterpret_cast<const char*>(data), static_cast<size_t>(count) * 4);
    } else {
      std::vector<uint16_t>& bits = half.emplace_back(static_cast<size_t>(count));
#pragma omp parallel for if (count > 65536)
      for (int64_t i = 0; i < count; ++i) bits[static_cast<size_t>(i)] = cpu::float_to_bf16(data[i]);
      stored.emplace_back(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
    }
    crcs[name] = crc32_hex(crc32_of(stored.back().first, stored.back().second));
    const uint64_t bytes = static_cast<uint64_t>(count) * elem;
    header[name] = {{"dtype", dtype == SafetensorsDType::f32 ? "F32" : "BF16"},
                    {"shape", h.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  // A given crc32 (the metadata of a file read back) describes other data: replaced.
  std::map<std::string, std::string> all_metadata = metadata;
  all_metadata[kChecksumMetadataKey] = crcs.dump();
  header["__metadata__"] = all_metadata;
  std::string json = header.dump();
  json.append((8 - (8 + json.size()) % 8) % 8, ' ');  // data section 8-byte aligned

  write_file_atomically(
      path,
      [&](std::ostream& out) {
        const uint64_t n = json.size();
        out.write(reinterpret_cast<const char*>(&n), 8);
        out.write(json.data(), static_cast<std::streamsize>(json.size()));
        for (const auto& [bytes, size] : stored) out.write(bytes, static_cast<std::streamsize>(size));
      },
      std::string(where) + path + "'");
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string where = "load_safetensors: '" + path + "': ";
  if (const std::optional<std::string> kind = non_regular_file_kind(path))
    throw Error(where + *kind + ", expected a regular file");
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(where + "cannot read: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(where + "cannot open: " + std::strerror(errno));
  if (file_size < 8) throw Error(where + "not a safetensors file: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");

  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  if (header_len > file_size - 8)
    throw Error(where + "header length " + std::to_string(header_len) + " overruns the file (" +
                std::to_string(file_size) + " bytes): truncated or not a safetensors file");
  if (header_len > kMaxHeaderBytes)
    throw Error(where + "header length " + std::to_string(header_len) + " exceeds the limit of " +
                std::to_string(kMaxHeaderBytes) + " bytes");
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  if (!in) throw Error(where + "reading the header failed");

  // Duplicate tensor names are refused here, as duplicate keys.
  const nlohmann::json header = parse_json_text(text, where + "header");
  if (!header.is_object()) throw Error(where + "header: expected a JSON object, got " + std::string(header.type_name()));

  SafetensorsFile file;
  file.path = path;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object())
        throw Error(where + "__metadata__: expected an object of strings, got " + json_excerpt(value));
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string())
          throw Error(where + "__metadata__: '" + excerpt(key) + "': expected a string, got " + json_excerpt(v));
        file.metadata[key] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, value));
  }
  // Files of other tools carry no checksums; lat's always do.
  std::map<std::string, std::string> crcs;
  if (auto it = file.metadata.find(kChecksumMetadataKey); it != file.metadata.end())
    crcs = parse_checksums(where, it->second, entries);

  // The entries must tile the data section exactly: in offset order, no overlap, no gap.
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected_begin = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    const std::string tensor = where + "tensor '" + excerpt(e.name) + "': ";
    if (e.end > data_size)
      throw Error(tensor + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  "] out of range: the data section holds " + std::to_string(data_size) + " bytes");
    // Neither of two overlapping tensors is more at fault than the other: both are named.
    if (e.begin < expected_begin)
      throw Error(where + "tensors '" + excerpt(previous->name) + "' data_offsets " + offsets_text(*previous) +
                  " and '" + excerpt(e.name) + "' data_offsets " + offsets_text(e) + " overlap");
    if (e.begin > expected_begin)
      throw Error(tensor + "data_offsets begin at " + std::to_string(e.begin) + ", leaving a gap after byte " +
                  std::to_string(expected_begin) + " of the data section");
    expected_begin = e.end;
    previous = &e;
  }
  if (expected_begin != data_size)
    throw Error(where + "the tensors cover " + std::to_string(expected_begin) + " of the " +
                std::to_string(data_size) + " bytes of the data section");

  std::vector<char> buffer;
  for (const Entry& e : entries) {
    const std::string tensor = where + "tensor '" + excerpt(e.name) + "'";
    Tensor t = Tensor::empty(e.shape, DType::f32);
    buffer.resize(e.end - e.begin);
    in.seekg(static_cast<std::streamoff>(data_start + e.begin));
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (!in) throw Error(tensor + ": reading its data failed");
    if (!crcs.empty()) verify_crc32(crcs.at(e.name), crc32_of(buffer.data(), buffer.size()), tensor);
    to_f32(e.dtype, buffer.data(), t.data<float>(), t.numel());
    file.tensors.emplace_back(e.name, t);
  }
  return file;
}

}  // namespace lat
