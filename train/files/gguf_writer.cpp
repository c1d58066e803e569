// Writing GGUF files (gguf_writer.h).
#include "train/files/gguf_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "autograd/cpu/bf16.h"
#include "lat/error.h"
#include "train/files/atomic_file.h"

namespace lat {
namespace {

constexpr uint32_t kGgufVersion = 3;

template <typename T>
void append_pod(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void append_string(std::string& out, const std::string& s) {
  append_pod<uint64_t>(out, s.size());
  out += s;
}

void pad_to_alignment(std::string& out) {
  out.append(static_cast<size_t>((kGgufAlignment - out.size() % kGgufAlignment) % kGgufAlignment), '\0');
}

}  // namespace

uint16_t float_to_f16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16: infinity
  if (magnitude < 0x38800000u) {
    // Below 2^-14, half's subnormals: multiples of 2^-24. The product is exact (a power of
    // two), and nearbyint rounds to nearest even; 1024 becomes the smallest normal.
    float m;
    std::memcpy(&m, &magnitude, sizeof(m));
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(m * 16777216.0f)));
  }
  // Rebias the exponent (127 -> 15) and keep 10 of the 23 significand bits; a carry out of
  // the significand correctly increments the exponent (up to infinity).
  uint32_t half = ((magnitude >> 23) - 127 + 15) << 10 | ((magnitude >> 13) & 0x3ffu);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

std::vector<uint8_t> quantize_q8_0(const std::vector<float>& values) {
  LAT_CHECK(values.size() % kQ8BlockSize == 0,
            "quantize_q8_0: expected a multiple of " << kQ8BlockSize << " values, got " << values.size());
  std::vector<uint8_t> out;
  out.reserve(values.size() / kQ8BlockSize * (2 + kQ8BlockSize));
  for (size_t b = 0; b < values.size(); b += kQ8BlockSize) {
    float amax = 0.0f;
    for (size_t j = 0; j < kQ8BlockSize; ++j) amax = std::max(amax, std::fabs(values[b + j]));
    const float d = amax / 127.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t scale = float_to_f16(d);
    out.push_back(static_cast<uint8_t>(scale & 0xffu));
    out.push_back(static_cast<uint8_t>(scale >> 8));
    // roundf (half away from zero) as ggml's reference quantizer; |x * inverse| <= 127.
    for (size_t j = 0; j < kQ8BlockSize; ++j)
      out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::roundf(values[b + j] * inverse))));
  }
  return out;
}

void GgufWriter::begin_kv(const std::string& key, GgufType type) {
  append_string(kv_, key);
  append_pod<uint32_t>(kv_, static_cast<uint32_t>(type));
  ++kv_count_;
}

void GgufWriter::add_uint32(const std::string& key, uint32_t value) {
  begin_kv(key, GgufType::uint32);
  append_pod(kv_, value);
}

void GgufWriter::add_int32(const std::string& key, int32_t value) {
  begin_kv(key, GgufType::int32);
  append_pod(kv_, value);
}

void GgufWriter::add_float32(const std::string& key, float value) {
  begin_kv(key, GgufType::float32);
  append_pod(kv_, value);
}

void GgufWriter::add_bool(const std::string& key, bool value) {
  begin_kv(key, GgufType::boolean);
  append_pod<uint8_t>(kv_, value ? 1 : 0);
}

void GgufWriter::add_string(const std::string& key, const std::string& value) {
  begin_kv(key, GgufType::string);
  append_string(kv_, value);
}

void GgufWriter::add_strings(const std::string& key, const std::vector<std::string>& values) {
  begin_kv(key, GgufType::array);
  append_pod<uint32_t>(kv_, static_cast<uint32_t>(GgufType::string));
  append_pod<uint64_t>(kv_, values.size());
  for (const std::string& v : values) append_string(kv_, v);
}

void GgufWriter::add_int32s(const std::string& key, const std::vector<int32_t>& values) {
  begin_kv(key, GgufType::array);
  append_pod<uint32_t>(kv_, static_cast<uint32_t>(GgufType::int32));
  append_pod<uint64_t>(kv_, values.size());
  for (int32_t v : values) append_pod(kv_, v);
}

void GgufWriter::add_float32s(const std::string& key, const std::vector<float>& values) {
  begin_kv(key, GgufType::array);
  append_pod<uint32_t>(kv_, static_cast<uint32_t>(GgufType::float32));
  append_pod<uint64_t>(kv_, values.size());
  for (float v : values) append_pod(kv_, v);
}

void GgufWriter::add_bools(const std::string& key, const std::vector<bool>& values) {
  begin_kv(key, GgufType::array);
  append_pod<uint32_t>(kv_, static_cast<uint32_t>(GgufType::boolean));
  append_pod<uint64_t>(kv_, values.size());
  for (bool v : values) append_pod<uint8_t>(kv_, v ? 1 : 0);
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& shape,
                            const std::vector<float>& values, GgmlType type) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  LAT_CHECK(
      !shape.empty() && static_cast<int64_t>(values.size()) == numel,
      "GgufWriter: tensor '" << name << "': expected " << numel << " values for its shape, got " << values.size());
  std::string data;
  switch (type) {
    case GgmlType::f32:
      data.resize(values.size() * sizeof(float));
      std::memcpy(data.data(), values.data(), data.size());
      break;
    case GgmlType::f16:
      for (float v : values) append_pod<uint16_t>(data, float_to_f16(v));
      break;
    case GgmlType::bf16:
      for (float v : values) append_pod<uint16_t>(data, cpu::float_to_bf16(v));
      break;
    case GgmlType::q8_0: {
      LAT_CHECK(shape.back() % kQ8BlockSize == 0, "GgufWriter: tensor '"
                                                      << name << "': q8_0 needs rows of a multiple of " << kQ8BlockSize
                                                      << " values, got " << shape.back());
      const std::vector<uint8_t> q = quantize_q8_0(values);
      data.assign(q.begin(), q.end());
      break;
    }
  }
  tensors_.push_back({name, shape, type, std::move(data)});
}

void GgufWriter::write_to(std::ostream& out) const {
  std::string head;
  head += "GGUF";
  append_pod<uint32_t>(head, kGgufVersion);
  append_pod<uint64_t>(head, tensors_.size());
  append_pod<uint64_t>(head, kv_count_);
  head += kv_;
  uint64_t offset = 0;
  for (const TensorInfo& t : tensors_) {
    append_string(head, t.name);
    append_pod<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) append_pod<uint64_t>(head, static_cast<uint64_t>(*it));
    append_pod<uint32_t>(head, static_cast<uint32_t>(t.type));
    append_pod<uint64_t>(head, offset);
    offset += (t.data.size() + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment;
  }
  pad_to_alignment(head);
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  // The data section starts aligned, so padding each tensor's data aligns the next offset.
  const std::string zeros(kGgufAlignment, '\0');
  for (const TensorInfo& t : tensors_) {
    out.write(t.data.data(), static_cast<std::streamsize>(t.data.size()));
    out.write(zeros.data(),
              static_cast<std::streamsize>((kGgufAlignment - t.data.size() % kGgufAlignment) % kGgufAlignment));
  }
}

void GgufWriter::write(const std::string& path, const std::string& who) const {
  write_file_atomically(
      path, [&](std::ostream& out) { write_to(out); }, who);
}

}  // namespace lat
