// Element types and devices of a Tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lat {

/// f32: the training dtype. f64: references and gradient checks (CPU only).
/// i64: token ids and targets.
enum class DType : uint8_t { f32, f64, i64 };

/// Bytes per element.
size_t dtype_size(DType dtype);
/// "f32", "f64", "i64".
const char* dtype_name(DType dtype);

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::i64; };

enum class DeviceType : uint8_t { cpu, cuda };

/// Where a tensor's storage lives: the host, or CUDA device `index`.
struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  /// "cpu" or "cuda:N".
  std::string str() const;
};

/// True when this build includes the CUDA backend (LAT_CUDA found nvcc).
bool cuda_built();
/// Number of visible CUDA devices; 0 when none or when CUDA is not built.
int cuda_device_count();

}  // namespace lat
