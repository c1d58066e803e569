// Tensor handle, storage, factories and element access.
#include "lat/tensor.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

#include "autograd/device_memory.h"
#include "lat/tape.h"

namespace lat {
namespace {

std::atomic<int64_t> g_live_storages{0};
std::atomic<int64_t> g_next_tensor_id{1};

// LAT_POISON=1 in the environment fills new float buffers with NaN, so a kernel that
// forgets to write an element is caught by the tests (ctest sets it).
bool poison_new_buffers() {
  static const bool poison = [] {
    const char* env = std::getenv("LAT_POISON");
    return env != nullptr && env[0] == '1';
  }();
  return poison;
}

double read_element(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::f64: return static_cast<const double*>(data)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
  }
  return 0.0;
}

void write_element(void* data, DType dtype, int64_t i, double value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(data)[i] = static_cast<float>(value); return;
    case DType::f64: static_cast<double*>(data)[i] = value; return;
    case DType::i64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(value); return;
  }
}

template <class T>
void fill_typed(T* p, int64_t n, T value) {
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void fill_cpu(void* data, DType dtype, int64_t n, double value) {
  switch (dtype) {
    case DType::f32: fill_typed(static_cast<float*>(data), n, static_cast<float>(value)); return;
    case DType::f64: fill_typed(static_cast<double*>(data), n, value); return;
    case DType::i64: fill_typed(static_cast<int64_t*>(data), n, static_cast<int64_t>(value)); return;
  }
}

void check_shape(const Shape& shape, const char* fn) {
  for (int64_t d : shape) LAT_CHECK(d >= 0, fn << ": shape " << shape_str(shape) << " has a negative dimension");
}

int64_t flat_index(const Tensor& t, std::initializer_list<int64_t> index, const char* fn) {
  LAT_CHECK(static_cast<int64_t>(index.size()) == t.dim(),
            fn << ": index has " << index.size() << " entries, tensor has " << t.dim() << " dims "
               << shape_str(t.shape()));
  int64_t flat = 0, d = 0;
  for (int64_t i : index) {
    int64_t n = t.shape()[d];
    int64_t j = i < 0 ? i + n : i;
    LAT_CHECK(j >= 0 && j < n, fn << ": index " << i << " out of range for dim " << d << " of size " << n);
    flat = flat * n + j;
    ++d;
  }
  return flat;
}

}  // namespace

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- Storage ----------------------------------------------------------------------
Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = detail::device_alloc(nbytes, device);
  g_live_storages.fetch_add(1, std::memory_order_relaxed);
}

Storage::~Storage() {
  detail::device_free(data_, device_);
  g_live_storages.fetch_sub(1, std::memory_order_relaxed);
}

int64_t Storage::live_count() { return g_live_storages.load(); }

// ---- Generator --------------------------------------------------------------------
double Generator::normal() { return std::normal_distribution<double>(0.0, 1.0)(engine_); }
double Generator::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }
int64_t Generator::randint(int64_t n) {
  LAT_CHECK(n > 0, "Generator::randint: n must be positive, got " << n);
  return std::uniform_int_distribution<int64_t>(0, n - 1)(engine_);
}
std::string Generator::state() const {
  std::ostringstream os;
  os << engine_;
  return os.str();
}
void Generator::set_state(const std::string& state) {
  std::istringstream is(state);
  std::mt19937_64 engine;
  is >> engine;
  LAT_CHECK(!is.fail(), "Generator::set_state: the text is not a saved generator state");
  engine_ = engine;
}

// ---- TensorImpl -------------------------------------------------------------------
TensorImpl::TensorImpl(std::shared_ptr<Storage> storage_, Shape shape_, DType dtype_)
    : storage(std::move(storage_)), shape(std::move(shape_)), numel(shape_numel(shape)), dtype(dtype_),
      id(g_next_tensor_id.fetch_add(1, std::memory_order_relaxed)) {}

// ---- factories ---------------------------------------------------------------------
Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape, "Tensor::empty");
  int64_t n = shape_numel(shape);
  auto storage = std::make_shared<Storage>(static_cast<size_t>(n) * dtype_size(dtype), device);
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), shape, dtype));
  if (poison_new_buffers() && dtype != DType::i64 && device.is_cpu())
    fill_cpu(t.raw_data(), dtype, n, std::numeric_limits<double>::quiet_NaN());
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, Device::cpu());
  fill_cpu(t.raw_data(), dtype, t.numel(), value);
  return device.is_cpu() ? t : t.to(device);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

namespace {
template <class T>
Tensor from_typed_vector(const std::vector<T>& data, const Shape& shape, const char* fn) {
  check_shape(shape, fn);
  LAT_CHECK(static_cast<int64_t>(data.size()) == shape_numel(shape),
            fn << ": data has " << data.size() << " elements, shape " << shape_str(shape) << " needs "
               << shape_numel(shape));
  Tensor t = Tensor::empty(shape, DTypeOf<T>::value);
  if (!data.empty()) std::memcpy(t.raw_data(), data.data(), data.size() * sizeof(T));
  return t;
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& data, const Shape& shape, bool requires_grad) {
  Tensor t = from_typed_vector(data, shape, "Tensor::from_vector");
  t.set_requires_grad(requires_grad);
  return t;
}
Tensor Tensor::from_vector(const std::vector<double>& data, const Shape& shape, bool requires_grad) {
  Tensor t = from_typed_vector(data, shape, "Tensor::from_vector");
  t.set_requires_grad(requires_grad);
  return t;
}
Tensor Tensor::from_vector(std::initializer_list<float> data, const Shape& shape, bool requires_grad) {
  return from_vector(std::vector<float>(data), shape, requires_grad);
}
Tensor Tensor::from_vector(const std::vector<int64_t>& data, const Shape& shape) {
  return from_typed_vector(data, shape, "Tensor::from_vector");
}

Tensor Tensor::arange(int64_t start, int64_t end, int64_t step, DType dtype) {
  LAT_CHECK(step != 0, "Tensor::arange: step must not be 0");
  int64_t n = std::max<int64_t>(0, (end - start + step + (step > 0 ? -1 : 1)) / step);
  Tensor t = empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) write_element(t.raw_data(), dtype, i, static_cast<double>(start + i * step));
  return t;
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype, double mean, double std) {
  LAT_CHECK(dtype != DType::i64, "Tensor::randn: dtype must be f32 or f64, got i64");
  Tensor t = empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) write_element(t.raw_data(), dtype, i, mean + std * gen.normal());
  return t;
}

Tensor Tensor::uniform(const Shape& shape, Generator& gen, double low, double high, DType dtype) {
  LAT_CHECK(dtype != DType::i64, "Tensor::uniform: dtype must be f32 or f64, got i64");
  LAT_CHECK(low <= high, "Tensor::uniform: low " << low << " > high " << high);
  Tensor t = empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i)
    write_element(t.raw_data(), dtype, i, low + (high - low) * gen.uniform());
  return t;
}

// ---- metadata ------------------------------------------------------------------------
#define LAT_REQUIRE_DEFINED(fn) LAT_CHECK(impl_ != nullptr, fn ": undefined tensor")

const Shape& Tensor::shape() const {
  LAT_REQUIRE_DEFINED("Tensor::shape");
  return impl_->shape;
}
int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  int64_t j = d < 0 ? d + n : d;
  LAT_CHECK(j >= 0 && j < n, "Tensor::size: dim " << d << " out of range for shape " << shape_str(shape()));
  return impl_->shape[j];
}
int64_t Tensor::numel() const {
  LAT_REQUIRE_DEFINED("Tensor::numel");
  return impl_->numel;
}
DType Tensor::dtype() const {
  LAT_REQUIRE_DEFINED("Tensor::dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  LAT_REQUIRE_DEFINED("Tensor::device");
  return impl_->storage->device();
}
int64_t Tensor::id() const {
  LAT_REQUIRE_DEFINED("Tensor::id");
  return impl_->id;
}

void* Tensor::raw_data() {
  LAT_REQUIRE_DEFINED("Tensor::raw_data");
  return impl_->storage->data();
}
const void* Tensor::raw_data() const {
  LAT_REQUIRE_DEFINED("Tensor::raw_data");
  return impl_->storage->data();
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  LAT_REQUIRE_DEFINED("Tensor::to_vector");
  Tensor host = to(Device::cpu());
  std::vector<T> out(static_cast<size_t>(numel()));
  if (DTypeOf<T>::value == dtype()) {
    if (!out.empty()) std::memcpy(out.data(), host.raw_data(), out.size() * sizeof(T));
  } else {
    for (int64_t i = 0; i < numel(); ++i) out[i] = static_cast<T>(read_element(host.raw_data(), dtype(), i));
  }
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

double Tensor::item() const {
  LAT_CHECK(numel() == 1, "Tensor::item: expected one element, got shape " << shape_str(shape()));
  Tensor host = to(Device::cpu());
  return read_element(host.raw_data(), dtype(), 0);
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  LAT_REQUIRE_DEFINED("Tensor::at");
  LAT_CHECK(device().is_cpu(), "Tensor::at: tensor is on " << device().str() << ", expected cpu");
  return read_element(raw_data(), dtype(), flat_index(*this, index, "Tensor::at"));
}

void Tensor::set(std::initializer_list<int64_t> index, double value) {
  LAT_REQUIRE_DEFINED("Tensor::set");
  LAT_CHECK(device().is_cpu(), "Tensor::set: tensor is on " << device().str() << ", expected cpu");
  write_element(raw_data(), dtype(), flat_index(*this, index, "Tensor::set"), value);
}

void Tensor::fill_(double value) {
  LAT_REQUIRE_DEFINED("Tensor::fill_");
  if (device().is_cpu()) {
    fill_cpu(raw_data(), dtype(), numel(), value);
  } else {
    copy_(full(shape(), value, dtype(), device()));
  }
}

void Tensor::copy_(const Tensor& src) {
  LAT_REQUIRE_DEFINED("Tensor::copy_");
  LAT_CHECK(src.defined(), "Tensor::copy_: src is undefined");
  LAT_CHECK(src.shape() == shape(), "Tensor::copy_: src shape " << shape_str(src.shape()) << ", expected "
                                                                << shape_str(shape()));
  LAT_CHECK(src.dtype() == dtype(), "Tensor::copy_: src dtype " << dtype_name(src.dtype()) << ", expected "
                                                                << dtype_name(dtype()));
  detail::device_copy(raw_data(), device(), src.raw_data(), src.device(), numel() * dtype_size(dtype()));
}

// ---- views and conversions -----------------------------------------------------------
Tensor Tensor::reshape(const Shape& new_shape) const {
  LAT_REQUIRE_DEFINED("Tensor::reshape");
  Shape resolved = new_shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      LAT_CHECK(infer < 0, "reshape: more than one -1 in " << shape_str(new_shape));
      infer = static_cast<int64_t>(i);
    } else {
      LAT_CHECK(resolved[i] >= 0, "reshape: negative dimension in " << shape_str(new_shape));
      known *= resolved[i];
    }
  }
  if (infer >= 0) {
    LAT_CHECK(known > 0 && numel() % known == 0,
              "reshape: cannot infer -1 in " << shape_str(new_shape) << " for " << numel() << " elements");
    resolved[infer] = numel() / known;
  }
  LAT_CHECK(shape_numel(resolved) == numel(), "reshape: shape " << shape_str(new_shape) << " has "
                                                                << shape_numel(resolved) << " elements, tensor "
                                                                << shape_str(shape()) << " has " << numel());
  Tensor out(std::make_shared<TensorImpl>(impl_->storage, resolved, impl_->dtype));
  if (needs_grad({this})) {
    Shape input_shape = shape();
    record("reshape", {*this}, {out}, [input_shape](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].reshape(input_shape)};
    });
  }
  return out;
}

Tensor Tensor::clone() const {
  LAT_REQUIRE_DEFINED("Tensor::clone");
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  if (needs_grad({this})) {
    record("clone", {*this}, {out}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  }
  return out;
}

Tensor Tensor::to(DType target) const {
  LAT_REQUIRE_DEFINED("Tensor::to");
  if (target == dtype()) return *this;
  LAT_CHECK(device().is_cpu(), "Tensor::to(dtype): only CPU tensors convert dtype, tensor is on "
                                   << device().str());
  Tensor out = empty(shape(), target);
  const void* src = raw_data();
  void* dst = out.raw_data();
  DType source = dtype();
  int64_t n = numel();
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) write_element(dst, target, i, read_element(src, source, i));
  bool floats = source != DType::i64 && target != DType::i64;
  if (floats && needs_grad({this})) {
    record("to_dtype", {*this}, {out}, [source](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(source)};
    });
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  LAT_REQUIRE_DEFINED("Tensor::to");
  if (target == device()) return *this;
  Tensor out = empty(shape(), dtype(), target);
  detail::device_copy(out.raw_data(), target, raw_data(), device(), numel() * dtype_size(dtype()));
  if (needs_grad({this})) {
    Device source = device();
    record("to_device", {*this}, {out}, [source](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(source)};
    });
  }
  return out;
}

Tensor Tensor::detach() const {
  LAT_REQUIRE_DEFINED("Tensor::detach");
  return Tensor(std::make_shared<TensorImpl>(impl_->storage, impl_->shape, impl_->dtype));
}

// ---- autograd fields -----------------------------------------------------------------
bool Tensor::requires_grad() const { return impl_ != nullptr && impl_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  LAT_REQUIRE_DEFINED("Tensor::set_requires_grad");
  LAT_CHECK(impl_->is_leaf, "Tensor::set_requires_grad: only leaf tensors can change requires_grad; "
                            "use detach() for a non-leaf");
  LAT_CHECK(!requires_grad || dtype() != DType::i64,
            "Tensor::set_requires_grad: i64 tensors cannot require grad");
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return impl_ == nullptr || impl_->is_leaf; }

Tensor Tensor::grad() const {
  LAT_REQUIRE_DEFINED("Tensor::grad");
  return Tensor(impl_->grad);
}

void Tensor::zero_grad() {
  LAT_REQUIRE_DEFINED("Tensor::zero_grad");
  impl_->grad.reset();
}

void Tensor::set_grad(const Tensor& grad) {
  LAT_REQUIRE_DEFINED("Tensor::set_grad");
  if (grad.defined()) {
    LAT_CHECK(grad.shape() == shape(), "Tensor::set_grad: grad shape " << shape_str(grad.shape())
                                                                       << ", expected " << shape_str(shape()));
    LAT_CHECK(grad.dtype() == dtype(), "Tensor::set_grad: grad dtype " << dtype_name(grad.dtype())
                                                                       << ", expected " << dtype_name(dtype()));
  }
  impl_->grad = grad.impl_ptr();
}

// ---- printing ------------------------------------------------------------------------
std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype()) << ", device="
     << device().str();
  if (requires_grad()) os << ", requires_grad";
  os << ")\n[";
  Tensor host = to(Device::cpu());
  const int64_t shown = std::min<int64_t>(numel(), 64);
  os << std::setprecision(6);
  for (int64_t i = 0; i < shown; ++i) {
    if (i) os << (dim() > 0 && i % shape().back() == 0 ? ",\n " : ", ");
    os << read_element(host.raw_data(), dtype(), i);
  }
  if (shown < numel()) os << ", ... (" << numel() - shown << " more)";
  os << "]";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace lat
