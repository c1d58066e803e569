// A GGUF file (version 3, little-endian), the format llama.cpp and ggml read:
//
//   magic "GGUF", version u32 = 3, tensor_count u64, kv_count u64
//   kv_count x (key: string, value type u32, value)          string = u64 length + UTF-8 bytes
//   tensor_count x (name: string, n_dims u32, ne u64[n_dims], ggml type u32, offset u64)
//   padding to general.alignment (32), then each tensor's data at its offset, each offset a
//   multiple of the alignment (zero padding between them)
//
// ne lists dimensions innermost first: a row-major [rows, cols] tensor is ne = {cols, rows}.
// Data types: f32; f16 (IEEE half) and bf16 (the top 16 bits of f32), both rounded to nearest
// even; q8_0, blocks of 32 values along a row, each one f16 scale d = max|x| / 127 and 32 int8
// q = round(x / d) (x ~ d * q).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace lat {

/// GGUF metadata value types (gguf.h's gguf_type).
enum class GgufType : uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12
};

/// ggml tensor data types this writer stores (ggml.h's ggml_type).
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q8_0 = 8, bf16 = 30 };

/// q8_0's block: 32 values share one scale.
inline constexpr int64_t kQ8BlockSize = 32;
/// The alignment of the data section and of every tensor's offset (general.alignment).
inline constexpr uint64_t kGgufAlignment = 32;

/// x rounded to the nearest IEEE half, ties to even, as its 16 bits (overflow gives infinity,
/// NaN stays NaN).
uint16_t float_to_f16(float x);

/// `values` (a multiple of kQ8BlockSize) as q8_0 blocks: per block the f16 scale, then 32 int8.
std::vector<uint8_t> quantize_q8_0(const std::vector<float>& values);

/// Collects metadata and tensors, then writes one GGUF file. Keys and tensor names keep the
/// order they were added in.
class GgufWriter {
 public:
  void add_uint32(const std::string& key, uint32_t value);
  void add_int32(const std::string& key, int32_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string(const std::string& key, const std::string& value);
  void add_strings(const std::string& key, const std::vector<std::string>& values);
  void add_int32s(const std::string& key, const std::vector<int32_t>& values);
  void add_float32s(const std::string& key, const std::vector<float>& values);
  void add_bools(const std::string& key, const std::vector<bool>& values);

  /// A tensor of row-major `shape` (outermost first) from f32 `values`, stored as `type`.
  /// Throws lat::Error naming the tensor when values do not fill the shape, or for q8_0 when
  /// the row length (shape's last dimension) is not a multiple of kQ8BlockSize.
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values,
                  GgmlType type);

  /// Writes the whole file to `out`: header, metadata and tensor infos, then each tensor's data.
  void write_to(std::ostream& out) const;

  /// The file written atomically to `path` (streamed: no second copy of the data); throws
  /// lat::Error naming `who` and the file.
  void write(const std::string& path, const std::string& who) const;

 private:
  struct TensorInfo {
    std::string name;
    std::vector<int64_t> shape;
    GgmlType type;
    std::string data;
  };
  std::string kv_;  // the encoded key-value pairs
  uint64_t kv_count_ = 0;
  std::vector<TensorInfo> tensors_;

  void begin_kv(const std::string& key, GgufType type);
};

}  // namespace lat
