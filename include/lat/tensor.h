// Tensor: a cheap shared handle to contiguous row-major storage plus autograd fields.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lat/dtype.h"
#include "lat/error.h"

namespace lat {

using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for the scalar shape {}).
int64_t shape_numel(const Shape& shape);

/// A block of device memory. Freed when the last Tensor using it goes away.
/// CPU storage is 64-byte aligned. `live_count()` counts the storages alive in the
/// process, which tests use to show that the tape does not leak.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  static int64_t live_count();

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

/// Seeded random source for initializers and data sampling. The state can be saved
/// and restored as text (checkpoints keep it so that resume is exact).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  /// One draw from N(0, 1).
  double normal();
  /// One draw from U[0, 1).
  double uniform();
  /// Uniform integer in [0, n).
  int64_t randint(int64_t n);
  std::mt19937_64& engine() { return engine_; }
  std::string state() const;
  /// Throws lat::Error when `state` was not produced by state().
  void set_state(const std::string& state);

 private:
  std::mt19937_64 engine_;
};

struct TensorImpl;

/// A handle to an n-dimensional array: shape (int64, {} for a scalar), dtype, device and
/// contiguous row-major storage, plus `requires_grad` and `grad` for the tape.
/// Copying a Tensor copies the handle, not the data.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories ------------------------------------------------------------
  /// Uninitialized storage (poisoned with NaN for floats in debug builds).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  /// Copies `data` (row-major) into a new tensor. Throws when data.size() != numel(shape).
  static Tensor from_vector(const std::vector<float>& data, const Shape& shape,
                            bool requires_grad = false);
  static Tensor from_vector(const std::vector<double>& data, const Shape& shape,
                            bool requires_grad = false);
  static Tensor from_vector(const std::vector<int64_t>& data, const Shape& shape);
  /// A braced list of numbers, e.g. from_vector({1, 2, 3, 4}, {2, 2}, true), makes an f32
  /// tensor (without this overload such a call would be ambiguous between the others).
  static Tensor from_vector(std::initializer_list<float> data, const Shape& shape, bool requires_grad = false);
  /// A scalar (shape {}).
  static Tensor scalar(double value, DType dtype = DType::f32);
  /// [start, start+step, ...) below `end`, 1-D.
  static Tensor arange(int64_t start, int64_t end, int64_t step = 1, DType dtype = DType::i64);
  static Tensor arange(int64_t end, DType dtype = DType::i64) { return arange(0, end, 1, dtype); }
  /// Samples of N(mean, std^2) drawn from `gen`.
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32,
                      double mean = 0.0, double std = 1.0);
  /// Samples of U[low, high) drawn from `gen`.
  static Tensor uniform(const Shape& shape, Generator& gen, double low = 0.0, double high = 1.0,
                        DType dtype = DType::f32);

  // ---- metadata -------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  /// Size of dimension d; negative d counts from the end.
  int64_t size(int64_t d) const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  /// Unique id of this tensor (views get their own); used by the tape.
  int64_t id() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // ---- data access ----------------------------------------------------------
  /// Typed pointer to the first element. Throws when T does not match dtype().
  template <class T> T* data();
  template <class T> const T* data() const;
  void* raw_data();
  const void* raw_data() const;
  /// Copy of all elements converted to T (CPU copy first if needed).
  template <class T = float> std::vector<T> to_vector() const;
  /// The single element of a one-element tensor, as double.
  double item() const;
  /// Element at a full index (negative indices count from the end), as double. For tests.
  double at(std::initializer_list<int64_t> index) const;
  /// Writes one element (no autograd). For tests and initializers.
  void set(std::initializer_list<int64_t> index, double value);
  /// Fills all elements with `value` in place (no autograd).
  void fill_(double value);
  /// Copies `src` (same shape and dtype) into this tensor in place (no autograd).
  void copy_(const Tensor& src);

  // ---- views and conversions ------------------------------------------------
  /// Same storage, new shape (one dimension may be -1). Differentiable.
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const { return reshape(shape); }
  /// Deep copy. Differentiable.
  Tensor clone() const;
  /// Converts the dtype (a copy unless it already matches). Differentiable between floats.
  Tensor to(DType dtype) const;
  /// Copies to another device (the same tensor when already there).
  Tensor to(Device device) const;
  /// Same storage, cut from the tape: requires_grad false.
  Tensor detach() const;

  // ---- autograd -------------------------------------------------------------
  bool requires_grad() const;
  /// Marks a leaf as a parameter whose gradient is accumulated. Returns *this.
  Tensor& set_requires_grad(bool requires_grad);
  /// True unless this tensor was produced by a recorded op.
  bool is_leaf() const;
  /// Accumulated gradient; undefined when none.
  Tensor grad() const;
  /// Drops the accumulated gradient.
  void zero_grad();
  /// Replaces the accumulated gradient (used by optimizers and collectives).
  void set_grad(const Tensor& grad);

  /// Multi-line human-readable form: shape, dtype and (up to 64) values.
  std::string str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// The state behind a Tensor handle. Ops read it; users go through Tensor.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  int64_t numel = 0;
  DType dtype = DType::f32;
  bool requires_grad = false;
  bool is_leaf = true;
  int64_t id = 0;
  std::shared_ptr<TensorImpl> grad;

  TensorImpl(std::shared_ptr<Storage> storage, Shape shape, DType dtype);
};

// ---- template definitions ---------------------------------------------------
template <class T> T* Tensor::data() {
  LAT_CHECK(defined(), "Tensor::data: undefined tensor");
  LAT_CHECK(DTypeOf<T>::value == dtype(), "Tensor::data: requested " << dtype_name(DTypeOf<T>::value)
                                                                     << ", tensor is " << dtype_name(dtype()));
  return static_cast<T*>(raw_data());
}
template <class T> const T* Tensor::data() const {
  LAT_CHECK(defined(), "Tensor::data: undefined tensor");
  LAT_CHECK(DTypeOf<T>::value == dtype(), "Tensor::data: requested " << dtype_name(DTypeOf<T>::value)
                                                                     << ", tensor is " << dtype_name(dtype()));
  return static_cast<const T*>(raw_data());
}

}  // namespace lat
