// Work over every parameter tensor of an optimizer in one OpenMP parallel region: each
// tensor cut into chunks of kParamChunk elements (its last chunk shorter), the chunks of all
// tensors in one list that the threads share. A step of a small model has dozens of tiny
// tensors; one region per tensor and per pass meant a thread-team barrier each, and on a
// machine shared with other processes every barrier can wait for a descheduled thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lat::optim_detail {

/// Elements per chunk. The gradient norm sums each chunk on its own, then a tensor's chunks
/// in order (optim/clip.cpp), so this length fixes the summation order: it never depends on
/// the thread count.
constexpr int64_t kParamChunk = 1 << 14;

/// Below this many elements in all, a pass runs on the calling thread: a team costs more.
constexpr int64_t kParamParallelMin = 1 << 15;

/// Elements [begin, end) of tensor `item` (an index into the caller's list).
struct ParamChunk {
  size_t item = 0;
  int64_t begin = 0, end = 0;
};

/// The chunks of tensors of `sizes` elements, tensor by tensor, each in element order (an
/// empty tensor has none).
inline std::vector<ParamChunk> param_chunks(const std::vector<int64_t>& sizes) {
  std::vector<ParamChunk> chunks;
  for (size_t item = 0; item < sizes.size(); ++item)
    for (int64_t begin = 0; begin < sizes[item]; begin += kParamChunk)
      chunks.push_back({item, begin, begin + kParamChunk < sizes[item] ? begin + kParamChunk : sizes[item]});
  return chunks;
}

/// Runs body(chunks[c], c) for every chunk, in one parallel region when the tensors hold
/// more than kParamParallelMin elements in all. Chunks are handed out dynamically: they
/// differ in size, and a thread the scheduler delays leaves its share to the others. The
/// body must write only its own chunk's elements (or slot c), so the result does not depend
/// on which thread ran it.
template <class F>
void for_each_param_chunk(const std::vector<ParamChunk>& chunks, int64_t total_elements, F&& body) {
  const int64_t n = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(dynamic) if (n > 1 && total_elements > kParamParallelMin)
  for (int64_t c = 0; c < n; ++c) body(chunks[static_cast<size_t>(c)], static_cast<size_t>(c));
}

}  // namespace lat::optim_detail
