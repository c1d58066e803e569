// Copying shape ops (transpose, permute, concat, split, slice) and the embedding lookup.
// All tensors are contiguous row-major, so every op here produces a fresh buffer; the
// backward of each is the matching inverse copy (or a scatter-add for embedding).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "lat/ops.h"
#include "lat/tape.h"
#ifdef LAT_WITH_CUDA
#include "autograd/cuda/nn.h"
#include "autograd/cuda/shape.h"
#endif

namespace lat {
namespace {

// Copies below this many bytes stay on one thread: forking costs more than it saves.
constexpr int64_t kParallelBytes = 1 << 18;

/// `t` is defined and on a device this build has kernels for (the CPU, or CUDA when built).
void check_device(const Tensor& t, const char* op, const char* arg) {
  LAT_CHECK(t.defined(), op << ": " << arg << ": undefined tensor");
#ifndef LAT_WITH_CUDA
  LAT_CHECK(t.device().is_cpu(), op << ": " << arg << ": expected a cpu tensor, got " << t.device().str());
#endif
}

/// Normalizes a possibly negative axis against `ndim` dims; throws naming op and argument.
int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op, const char* arg, const Shape& shape) {
  int64_t a = axis < 0 ? axis + ndim : axis;
  LAT_CHECK(a >= 0 && a < ndim, op << ": " << arg << ": " << axis << " out of range for shape " << shape_str(shape));
  return a;
}

int64_t prod(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n *= shape[i];
  return n;
}

/// For each of `outer` blocks: dst[o, dst_start : dst_start + count, :] = src[o, src_start : src_start + count, :],
/// where src has src_len and dst has dst_len entries along the axis and `inner` elements
/// follow the axis. Element size `esize` bytes; src and dst on `device`.
void copy_along_axis(const void* src, int64_t src_len, int64_t src_start, void* dst, int64_t dst_len,
                     int64_t dst_start, int64_t count, int64_t outer, int64_t inner, size_t esize, Device device) {
#ifdef LAT_WITH_CUDA
  if (device.is_cuda()) {
    cuda::copy_along_axis({src, src_len, src_start, dst, dst_len, dst_start, count, outer, inner, esize, device.index});
    return;
  }
#else
  (void)device;
#endif
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  const size_t block = static_cast<size_t>(count * inner) * esize;
  if (block == 0) return;
#pragma omp parallel for if (outer * static_cast<int64_t>(block) > kParallelBytes)
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(d + static_cast<size_t>((o * dst_len + dst_start) * inner) * esize,
                s + static_cast<size_t>((o * src_len + src_start) * inner) * esize, block);
}

/// Permuted copy: output dim i is input dim perm[i]. When the input's contiguous last dim
/// stays last, the output is copied row by row. Otherwise it lands at some output dim p,
/// and 2-D tiles over (p, last) are copied so that reads and writes both stay within a
/// few cache lines (a row-by-row walk would read with a large stride; ~10x slower).
template <class E>
void permute_copy(const E* src, E* dst, const Shape& in_shape, const std::vector<int64_t>& perm) {
  const int64_t n = static_cast<int64_t>(in_shape.size());
  if (n == 0) {
    dst[0] = src[0];
    return;
  }
  std::vector<int64_t> in_strides(n), out_strides(n), read_strides(n);
  Shape out_shape(n);
  int64_t numel = 1;
  for (int64_t d = n - 1; d >= 0; --d) {
    in_strides[d] = numel;
    numel *= in_shape[d];
  }
  for (int64_t i = 0; i < n; ++i) {
    out_shape[i] = in_shape[perm[i]];
    read_strides[i] = in_strides[perm[i]];
  }
  for (int64_t d = n - 1, s = 1; d >= 0; s *= out_shape[d], --d) out_strides[d] = s;
  const int64_t inner = out_shape[n - 1], inner_stride = read_strides[n - 1];
  const bool parallel = numel * static_cast<int64_t>(sizeof(E)) > kParallelBytes;

  if (inner_stride == 1) {
    const int64_t rows = numel / inner;
#pragma omp parallel for if (parallel)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rest = r, offset = 0;
      for (int64_t d = n - 2; d >= 0; --d) {
        offset += (rest % out_shape[d]) * read_strides[d];
        rest /= out_shape[d];
      }
      std::memcpy(dst + r * inner, src + offset, static_cast<size_t>(inner) * sizeof(E));
    }
    return;
  }

  constexpr int64_t kTile = 32;
  const int64_t p = std::find(perm.begin(), perm.end(), n - 1) - perm.begin();
  const int64_t len_p = out_shape[p], stride_p = out_strides[p];
  const int64_t outer = numel / (len_p * inner);
  const int64_t tiles_p = (len_p + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) if (parallel)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t tp = 0; tp < tiles_p; ++tp) {
      // Offsets of the dims other than p and the last, decomposed from o.
      int64_t rest = o, in_offset = 0, out_offset = 0;
      for (int64_t d = n - 2; d >= 0; --d) {
        if (d == p) continue;
        const int64_t index = rest % out_shape[d];
        rest /= out_shape[d];
        in_offset += index * read_strides[d];
        out_offset += index * out_strides[d];
      }
      const int64_t i0 = tp * kTile, ni = std::min(len_p, i0 + kTile) - i0;
      E tile[kTile][kTile];
      for (int64_t j0 = 0; j0 < inner; j0 += kTile) {
        const int64_t nj = std::min(inner, j0 + kTile) - j0;
        // Read along p (contiguous in the input), write along the last dim (contiguous in
        // the output), through a tile small enough for L1.
        for (int64_t j = 0; j < nj; ++j) {
          const E* r = src + in_offset + (j0 + j) * inner_stride + i0;
          for (int64_t i = 0; i < ni; ++i) tile[j][i] = r[i];
        }
        for (int64_t i = 0; i < ni; ++i) {
          E* w = dst + out_offset + (i0 + i) * stride_p + j0;
          for (int64_t j = 0; j < nj; ++j) w[j] = tile[j][i];
        }
      }
    }
}

Tensor permute_impl(const Tensor& a, const std::vector<int64_t>& perm_in, const char* op) {
  check_device(a, op, "a");
  const int64_t n = a.dim();
  LAT_CHECK(static_cast<int64_t>(perm_in.size()) == n,
            op << ": perm: expected " << n << " entries for shape " << shape_str(a.shape()) << ", got "
               << shape_str(perm_in));
  std::vector<int64_t> perm(n);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    perm[i] = normalize_axis(perm_in[i], n, op, "perm", a.shape());
    LAT_CHECK(!seen[perm[i]], op << ": perm: " << shape_str(perm_in) << " is not a permutation of " << n << " dims");
    seen[perm[i]] = true;
  }
  Shape out_shape(n);
  for (int64_t i = 0; i < n; ++i) out_shape[i] = a.shape()[perm[i]];
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
#ifdef LAT_WITH_CUDA
  if (a.device().is_cuda()) {
    cuda::permute(a.raw_data(), out.raw_data(), a.shape(), perm, dtype_size(a.dtype()), a.device().index);
  } else
#endif
  if (out.numel() > 0) {
    if (dtype_size(a.dtype()) == 4)
      permute_copy(static_cast<const uint32_t*>(a.raw_data()), static_cast<uint32_t*>(out.raw_data()), a.shape(), perm);
    else
      permute_copy(static_cast<const uint64_t*>(a.raw_data()), static_cast<uint64_t*>(out.raw_data()), a.shape(), perm);
  }
  if (needs_grad({&a})) {
    std::vector<int64_t> inverse(n);
    for (int64_t i = 0; i < n; ++i) inverse[perm[i]] = i;
    record(op, {a}, {out}, [inverse](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{permute(g[0], inverse)};
    });
  }
  return out;
}

}  // namespace

Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1) {
  check_device(a, "transpose", "a");
  const int64_t n = a.dim();
  int64_t d0 = normalize_axis(dim0, n, "transpose", "dim0", a.shape());
  int64_t d1 = normalize_axis(dim1, n, "transpose", "dim1", a.shape());
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return permute_impl(a, perm, "transpose");
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& perm) { return permute_impl(a, perm, "permute"); }

Tensor concat(const std::vector<Tensor>& tensors, int64_t axis) {
  LAT_CHECK(!tensors.empty(), "concat: tensors: expected at least one tensor, got none");
  const Tensor& first = tensors[0];
  check_device(first, "concat", "tensors[0]");
  const int64_t n = first.dim();
  LAT_CHECK(n >= 1, "concat: tensors[0]: expected at least 1 dim, got shape " << shape_str(first.shape()));
  const int64_t ax = normalize_axis(axis, n, "concat", "axis", first.shape());
  Shape out_shape = first.shape();
  out_shape[ax] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    std::string arg = "tensors[" + std::to_string(i) + "]";
    check_device(t, "concat", arg.c_str());
    LAT_CHECK(t.dtype() == first.dtype(), "concat: " << arg << ": expected dtype " << dtype_name(first.dtype())
                                                     << ", got " << dtype_name(t.dtype()));
    LAT_CHECK(t.device() == first.device(), "concat: " << arg << ": expected device " << first.device().str()
                                                       << ", got " << t.device().str());
    bool compatible = t.dim() == n;
    for (int64_t d = 0; compatible && d < n; ++d) compatible = d == ax || t.shape()[d] == first.shape()[d];
    LAT_CHECK(compatible, "concat: " << arg << ": expected shape " << shape_str(first.shape()) << " except along axis "
                                     << ax << ", got " << shape_str(t.shape()));
    sizes.push_back(t.shape()[ax]);
    out_shape[ax] += t.shape()[ax];
  }
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  const int64_t outer = prod(out_shape, 0, ax), inner = prod(out_shape, ax + 1, out_shape.size());
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    copy_along_axis(t.raw_data(), t.shape()[ax], 0, out.raw_data(), out_shape[ax], offset, t.shape()[ax], outer, inner,
                    dtype_size(t.dtype()), t.device());
    offset += t.shape()[ax];
  }
  if (needs_grad(tensors)) {
    record("concat", tensors, {out}, [sizes, ax](const std::vector<Tensor>& g) { return split(g[0], sizes, ax); });
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t axis) {
  check_device(a, "split", "a");
  LAT_CHECK(a.dim() >= 1, "split: a: expected at least 1 dim, got shape " << shape_str(a.shape()));
  const int64_t ax = normalize_axis(axis, a.dim(), "split", "axis", a.shape());
  int64_t total = 0;
  for (int64_t s : sizes) {
    LAT_CHECK(s >= 0, "split: sizes: expected non-negative sizes, got " << shape_str(sizes));
    total += s;
  }
  LAT_CHECK(total == a.shape()[ax], "split: sizes: " << shape_str(sizes) << " sum to " << total << ", expected dim "
                                                     << ax << " of " << shape_str(a.shape()) << " = "
                                                     << a.shape()[ax]);
  const int64_t outer = prod(a.shape(), 0, ax), inner = prod(a.shape(), ax + 1, a.shape().size());
  std::vector<Tensor> outs;
  outs.reserve(sizes.size());
  int64_t offset = 0;
  for (int64_t s : sizes) {
    Shape shape = a.shape();
    shape[ax] = s;
    Tensor out = Tensor::empty(shape, a.dtype(), a.device());
    copy_along_axis(a.raw_data(), a.shape()[ax], offset, out.raw_data(), s, 0, s, outer, inner, dtype_size(a.dtype()),
                    a.device());
    outs.push_back(out);
    offset += s;
  }
  if (needs_grad({&a})) {
    record("split", {a}, outs, [ax](const std::vector<Tensor>& g) { return std::vector<Tensor>{concat(g, ax)}; });
  }
  return outs;
}

Tensor slice(const Tensor& a, int64_t axis, int64_t start, int64_t end) {
  check_device(a, "slice", "a");
  LAT_CHECK(a.dim() >= 1, "slice: a: expected at least 1 dim, got shape " << shape_str(a.shape()));
  const int64_t ax = normalize_axis(axis, a.dim(), "slice", "axis", a.shape());
  const int64_t len = a.shape()[ax];
  LAT_CHECK(0 <= start && start <= end && end <= len, "slice: [start, end): expected 0 <= start <= end <= "
                                                          << len << " (dim " << ax << " of " << shape_str(a.shape())
                                                          << "), got [" << start << ", " << end << ")");
  Shape shape = a.shape();
  shape[ax] = end - start;
  const int64_t outer = prod(a.shape(), 0, ax), inner = prod(a.shape(), ax + 1, a.shape().size());
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  copy_along_axis(a.raw_data(), len, start, out.raw_data(), end - start, 0, end - start, outer, inner,
                  dtype_size(a.dtype()), a.device());
  if (needs_grad({&a})) {
    Shape in_shape = a.shape();
    DType dtype = a.dtype();
    record("slice", {a}, {out}, [in_shape, dtype, ax, start, end, len, outer, inner](const std::vector<Tensor>& g) {
      Tensor da = Tensor::zeros(in_shape, dtype, g[0].device());
      copy_along_axis(g[0].raw_data(), end - start, 0, da.raw_data(), len, start, end - start, outer, inner,
                      dtype_size(dtype), g[0].device());
      return std::vector<Tensor>{da};
    });
  }
  return out;
}

// ---- embedding ----------------------------------------------------------------------
namespace {

/// "[i, j, k]": the multi-index of flat position p in `shape`.
std::string position_str(int64_t p, const Shape& shape) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = p % shape[d];
    p /= shape[d];
  }
  return shape_str(index);
}

/// dweight[ids[i], :] += g[i, :] for every i. Each thread owns a block of columns, so the
/// scatter-add has no races and a fixed summation order (repeated ids add up in order).
template <class T>
void embedding_backward(const T* g, const int64_t* ids, int64_t count, int64_t dim, T* dweight) {
  constexpr int64_t kColumns = 64;
  const int64_t blocks = (dim + kColumns - 1) / kColumns;
#pragma omp parallel for if (count * dim > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kColumns, j1 = std::min(dim, j0 + kColumns);
    for (int64_t i = 0; i < count; ++i) {
      const T* src = g + i * dim;
      T* dst = dweight + ids[i] * dim;
      for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_device(weight, "embedding", "weight");
  check_device(ids, "embedding", "ids");
  LAT_CHECK(weight.dtype() == DType::f32 || weight.dtype() == DType::f64,
            "embedding: weight: expected f32 or f64, got " << dtype_name(weight.dtype()));
  LAT_CHECK(weight.dim() == 2, "embedding: weight: expected shape [num_embeddings, dim], got "
                                   << shape_str(weight.shape()));
  LAT_CHECK(ids.dtype() == DType::i64, "embedding: ids: expected i64, got " << dtype_name(ids.dtype()));
  const int64_t num = weight.size(0), dim = weight.size(1), count = ids.numel();
  // The ids are checked on the host; on a device they are read where the weight lives.
  const Tensor ids_host = ids.to(Device::cpu());
  const int64_t* id = ids_host.data<int64_t>();
  for (int64_t i = 0; i < count; ++i)
    LAT_CHECK(id[i] >= 0 && id[i] < num, "embedding: ids: id " << id[i] << " at position "
                                                               << position_str(i, ids.shape())
                                                               << " is out of range [0, " << num << ")");
  Shape out_shape = ids.shape();
  out_shape.push_back(dim);
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
#ifdef LAT_WITH_CUDA
  if (weight.device().is_cuda()) {
    const Tensor ids_device = ids.to(weight.device());
    cuda::embedding_forward(weight.dtype(), weight.raw_data(), ids_device.data<int64_t>(), count, dim,
                            out.raw_data(), weight.device().index);
    if (needs_grad({&weight})) {
      Shape weight_shape = weight.shape();
      record("embedding", {weight}, {out}, [ids_device, weight_shape](const std::vector<Tensor>& g) {
        const Tensor& go = g[0];
        Tensor dweight = Tensor::empty(weight_shape, go.dtype(), go.device());
        cuda::embedding_backward(go.dtype(), go.raw_data(), ids_device.data<int64_t>(), ids_device.numel(),
                                 weight_shape[1], weight_shape[0], dweight.raw_data(), go.device().index);
        return std::vector<Tensor>{dweight};
      });
    }
    return out;
  }
#endif
  const size_t esize = dtype_size(weight.dtype());
  const auto* w = static_cast<const char*>(weight.raw_data());
  auto* o = static_cast<char*>(out.raw_data());
  const size_t row = static_cast<size_t>(dim) * esize;
#pragma omp parallel for if (count * static_cast<int64_t>(row) > kParallelBytes)
  for (int64_t i = 0; i < count; ++i) std::memcpy(o + i * row, w + id[i] * row, row);

  if (needs_grad({&weight})) {
    Tensor saved_ids = ids_host.detach();
    Shape weight_shape = weight.shape();
    record("embedding", {weight}, {out}, [saved_ids, weight_shape](const std::vector<Tensor>& g) {
      const Tensor& go = g[0];
      Tensor dweight = Tensor::zeros(weight_shape, go.dtype());
      const int64_t n = saved_ids.numel(), d = weight_shape[1];
      if (go.dtype() == DType::f32)
        embedding_backward(go.data<float>(), saved_ids.data<int64_t>(), n, d, dweight.data<float>());
      else
        embedding_backward(go.data<double>(), saved_ids.data<int64_t>(), n, d, dweight.data<double>());
      return std::vector<Tensor>{dweight};
    });
  }
  return out;
}

}  // namespace lat
