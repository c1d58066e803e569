// The safetensors format (huggingface/safetensors, docs "format"): an 8-byte little-endian
// header length N, N bytes of JSON header {"<name>": {"dtype", "shape", "data_offsets":
// [begin, end]}, ..., optional "__metadata__": {string: string}}, then the data section, each
// tensor's raw little-endian bytes in row-major order at [begin, end) relative to the start
// of the data section. lat pads the header with spaces so the data section starts 8-byte
// aligned (readers that memory-map the file rely on it), and records in __metadata__ 'crc32'
// a JSON object string {"<name>": "<8 hex digits>", ...}: the CRC-32 (checksum.h) of each
// tensor's bytes as stored (F32 or BF16), verified on reading so a flipped bit is detected.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lat/tensor.h"

namespace lat {

/// The __metadata__ key of the per-tensor checksums.
inline constexpr const char* kChecksumMetadataKey = "crc32";

/// Element types lat writes. Reading also accepts F16 (converted to f32).
enum class SafetensorsDType { f32, bf16 };

/// "f32" -> f32, "bf16" -> bf16 (the `lat export --dtype` values). Throws lat::Error otherwise.
SafetensorsDType parse_safetensors_dtype(const std::string& name);

/// IEEE half bits -> float (exact, subnormals and infinities included).
float f16_to_float(uint16_t bits);

/// The tensors of a safetensors file, on the CPU as f32, in data-section order.
struct SafetensorsFile {
  std::string path;  // the file read (for messages)
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;  // __metadata__ (empty when absent)

  /// The tensor `name`. Throws lat::Error "'<path>': no tensor '<name>'" when it is absent.
  const Tensor& at(const std::string& name) const;
};

/// Writes `tensors` (any float dtype and device; converted on the way) to `path` in `dtype`,
/// with `metadata` and the checksums of the data written (kChecksumMetadataKey, replacing one
/// in `metadata`) as __metadata__, in the given order. Writes `<path>.tmp`, then renames it
/// over `path`. Throws lat::Error naming the file for an empty, duplicate or "__metadata__"
/// name, an undefined or integer tensor, or an I/O failure.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      SafetensorsDType dtype = SafetensorsDType::f32,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file; F32, BF16 and F16 tensors become f32. The whole header is checked
/// before any tensor is allocated. Throws lat::Error naming the file and the problem (the
/// tensor and any quoted value cut to an excerpt): missing, unreadable or not a regular file,
/// shorter than 8 bytes, header length overrunning the file, header not a JSON object, nested
/// deeper than kMaxJsonDepth or repeating a key (a tensor name given twice), an entry without
/// dtype/shape/data_offsets or with wrong types, an unknown or unsupported dtype, a shape of
/// rank above 8 or whose size overflows int64, offsets that do not match the shape, lie outside
/// the data section, overlap (naming both tensors) or leave gaps, __metadata__ values that are
/// not strings, and, when __metadata__ has 'crc32', checksums that do not name exactly the
/// file's tensors or do not match a tensor's bytes. Files without 'crc32' (other tools') are read unchecked.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace lat
