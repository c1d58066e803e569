// Reading and checking the offsets of packed batches (see cu_seqlens.h).
#include "layers/cu_seqlens.h"

#include <algorithm>

namespace lat {

std::vector<int64_t> read_cu_seqlens(const char* op, const Tensor& cu_seqlens, int64_t B, int64_t T) {
  LAT_CHECK(cu_seqlens.dtype() == DType::i64,
            op << ": cu_seqlens: expected dtype i64, got " << dtype_name(cu_seqlens.dtype()));
  LAT_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2,
            op << ": cu_seqlens: expected shape [N + 1] with N >= 1 sequences, got " << shape_str(cu_seqlens.shape()));
  LAT_CHECK(B == 1,
            op << ": cu_seqlens: expected a batch of one row (B == 1) holding the packed sequences, got B=" << B);
  const Tensor host = cu_seqlens.to(Device::cpu());
  const int64_t* c = host.data<int64_t>();
  std::vector<int64_t> offsets(c, c + host.numel());
  LAT_CHECK(offsets.front() == 0, op << ": cu_seqlens: expected c_0 = 0, got " << offsets.front());
  for (size_t i = 0; i + 1 < offsets.size(); ++i)
    LAT_CHECK(offsets[i + 1] > offsets[i], op << ": cu_seqlens: expected strictly increasing offsets, got c_" << i + 1
                                              << " = " << offsets[i + 1] << " after c_" << i << " = " << offsets[i]);
  LAT_CHECK(offsets.back() == T, op << ": cu_seqlens: expected c_N = T = " << T << " (the tokens of the row), got c_"
                                    << offsets.size() - 1 << " = " << offsets.back());
  return offsets;
}

std::vector<int64_t> sequence_starts(const std::vector<int64_t>& offsets) {
  std::vector<int64_t> starts(static_cast<size_t>(offsets.back()));
  for (size_t n = 0; n + 1 < offsets.size(); ++n)
    std::fill(starts.begin() + offsets[n], starts.begin() + offsets[n + 1], offsets[n]);
  return starts;
}

Tensor cu_seqlens_with_row_starts(const char* op, const Tensor& cu_seqlens, int64_t B, int64_t T) {
  std::vector<int64_t> offsets = read_cu_seqlens(op, cu_seqlens, 1, B * T);
  for (int64_t b = 1; b < B; ++b) offsets.push_back(b * T);
  std::sort(offsets.begin(), offsets.end());
  offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
  return Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())});
}

}  // namespace lat
